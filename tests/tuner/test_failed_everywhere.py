"""A node every measurement failed on is named with the smallest failed candidate on it and its nodes in a
few words (the message used to print the whole model's candidate: every node id of a 143-node model)."""
from collage.graph.ir import Graph
from collage.measure.db import Cost
from collage.search.candidates import Candidate
from collage.tuner.steps.measure import failed_everywhere, nodes_text
from tests.helpers import chain_model


def _cost(error=None):
    return Cost("fp", "onnxruntime", "1", "cpu", "", "m", None if error else 1.0, error=error)


def test_names_the_smallest_failed_candidate_and_its_nodes_briefly():
    graph = Graph.load(chain_model(12))
    n = len(graph)
    whole, pair, one = tuple(range(n)), (3, 4), (4,)
    cands = [Candidate(whole, "onnxruntime"), Candidate(pair, "openvino"), Candidate(one, "openvino"),
             Candidate(tuple(i for i in range(n) if i != 4), "openvino")]
    raw = {(whole, "onnxruntime"): _cost("whole model failed"), (pair, "openvino"): _cost("pair failed"),
           (one, "openvino"): _cost("node 4 unsupported dtype"), (cands[3].nodes, "openvino"): _cost()}
    text = failed_everywhere(graph, cands, raw)
    # node 4: the whole model, the pair and the node alone failed; the node alone says why
    assert text.endswith("every measurement of #4 MatMul 'mm4' failed, so no plan can run it; on openvino "
                         "(node #4): node 4 unsupported dtype")
    text = failed_everywhere(graph, cands[:1], {(whole, "onnxruntime"): _cost("whole model failed")})
    assert text.endswith(f"on onnxruntime (nodes #0-#{n - 1}): whole model failed") and "[0, 1," not in text


def test_nodes_text():
    assert nodes_text((4,)) == "node #4"
    assert nodes_text((3, 4, 5)) == "nodes #3-#5"
    assert nodes_text((3, 7, 40)) == "3 nodes, #3 to #40"
