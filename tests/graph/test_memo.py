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


def test_fingerprints_are_the_digests_every_cost_db_holds():
    """The fingerprint is made of cached parts now (a node's op and attributes, each tensor's dtype and shape, once
    per graph); its digests must stay what they were, or every measurement in every cost DB is orphaned. These
    were computed by the code before the parts were cached (commit 0259ab5)."""
    from collage import zoo

    g = zoo.load_graph("zoo:tiny-bert")
    layer = [i for i in range(len(g)) if g.op(i).name.startswith("encoder.layer.0.")]
    assert (len(g), len(layer)) == (80, 34)
    assert g.fingerprint(layer) == "dd8e3eb3bfa734dc81404137"
    assert g.fingerprint(layer[:-1]) == "c4cdee999560f7d9110fd4cd"
    assert g.fingerprint(range(len(g))) == "c991bf18b6b866fdb3095523"
    assert g.fingerprint([0]) == "cb70382d6ffb57eb0f956df4"
