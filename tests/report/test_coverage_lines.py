"""The terminal's and report's sentence on guided measuring names the cost model that priced the unmeasured
candidates: the shipped one on a fresh DB, the learned one once the DB has measurements (issue 40: the line said
"the learned cost model" when the shipped model had priced everything)."""
from collage.report.coverage import estimates_line

SHIPPED = {"machine_class": "avx512", "this_class": "avx2", "scale": 2.4}


def test_the_shipped_model_is_named_when_it_priced_every_backend():
    est = {"estimated": 83, "training_rows": {}, "shipped": {**SHIPPED, "priced": ["onnxruntime", "openvino"]}}
    line = estimates_line(est)
    assert line.startswith("guided by the cost model shipped for avx512 CPUs, scaled to this machine by its probe:")
    assert "learned" not in line


def test_both_are_named_when_the_db_priced_some_backends():
    est = {"estimated": 5, "training_rows": {"onnxruntime": 120, "openvino": 12},
           "shipped": {**SHIPPED, "priced": ["openvino"]}}
    line = estimates_line(est)
    assert "shipped for avx512 CPUs, scaled to this machine by its probe (openvino)" in line
    assert "the one learned from the cost DB (onnxruntime)" in line


def test_the_learned_model_alone_when_nothing_shipped_priced():
    for shipped in (None, {**SHIPPED, "priced": []}):
        est = {"estimated": 5, "training_rows": {"onnxruntime": 120}, "shipped": shipped}
        assert estimates_line(est).startswith("guided by the learned cost model: 5 candidate(s) estimated")


def test_the_filled_count_is_said_where_rounds_were_filled():
    est = {"estimated": 5, "training_rows": {"onnxruntime": 120}, "filled": 269}
    assert "; 269 measured in measuring order beside the rounds" in estimates_line(est)
    assert "measuring order" not in estimates_line({**est, "filled": 0})
