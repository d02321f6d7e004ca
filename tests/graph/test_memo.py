"""A node set's boundary and fingerprint are computed once per graph (a large graph's tune asks for each of its
candidates' several times: inception_v2 has 143,388); the answers are the same as computed afresh, and a caller
that changes the lists it got back does not change the next answer."""
from collage.graph.ir import Graph
from tests.helpers import chain_model


def test_boundary_is_memoised_and_copies_out():
    g = Graph.load(chain_model(6))
    first = g.boundary([2, 3])
    first[0].append("not a tensor")
    first[1].clear()
    again = g.boundary([3, 2])
    assert again == Graph.load(chain_model(6)).boundary([2, 3])
    assert "not a tensor" not in again[0] and again[1]


def test_fingerprint_is_memoised_and_the_same_as_fresh():
    g = Graph.load(chain_model(6))
    assert g.fingerprint([1, 2]) == g.fingerprint((2, 1)) == Graph.load(chain_model(6)).fingerprint([1, 2])
