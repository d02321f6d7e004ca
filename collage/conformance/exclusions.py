"""ONNX backend-test cases left out of collage's conformance runs, as data: test-name regex -> reason.

Only cases that cannot say anything about collage's correctness belong here (the suite's own data needs a
network, or the expected output is one particular random draw). Anything a backend computes wrongly is
NOT excluded: that backend's ``supports()`` refuses it instead. Cases collage refuses cleanly (string
tensors, sequences, optionals, training ops, ai.onnx.ml...) need no entry: they are counted as refused,
with the refusal's reason, in results/backends/onnx-conformance.md.
"""
from __future__ import annotations

#: (test-name regex, reason, backends it applies to: None = every plan; else only plans using one of them)
EXCLUDED: list[tuple[str, str, tuple[str, ...] | None]] = [
    # outputs are one random draw of ONNX's reference implementation: no backend can match them
    (r"^test_bernoulli", "random op: the expected output is one random draw (the RNG is not specified by ONNX)", None),
    (r"^test_random(uniform|normal)", "random op: the expected output is one random draw", None),
    (r"^test_dropout_random", "random op (training-mode Dropout): the expected output is one random draw", None),
    (r"^test_training_dropout(?!_zero_ratio)", "random op (training-mode Dropout): one random draw", None),
    # tolerance artefacts of the test itself (the result is right to float precision)
    (r"^test_(dft|stft)", "tolerance artefact: float32 FFT rounding leaves ~1e-5..1e-4 where the expected value is 0, "
                          "against the test's atol of 1e-7 (ONNX Runtime's own suite filters these too)",
     ("onnxruntime",)),
    (r"^test_attention_4d_causal_fp16", "tolerance artefact: one element off by one float16 ulp (4.9e-4 at 0.398, "
                                        "relative 1.2e-3 against the test's rtol 1e-3)", ("onnxruntime",)),
    (r"^test_squeezenet", "tolerance artefact: the light model's dummy weights grow the logits to ~1e10, where "
                          "float32 rounding in another summation order (relative 4e-7) moves logits by ~4e3 and the "
                          "Softmax turns that into one-hot instead of uniform", ("openvino",)),
    (r"^test_dynamicquantizelinear_expanded", "tolerance artefact: x / scale lands exactly on 25.5, and OpenVINO's "
                                              "division (one float32 ulp off) rounds it to 25 instead of 26",
     ("openvino",)),
]


def excluded(name: str, backends: tuple[str, ...] | list[str]) -> str | None:
    """The reason test ``name`` is left out of a plan over ``backends``, or None."""
    import re

    for rx, reason, only in EXCLUDED:
        if re.search(rx, name) and (only is None or any(b in only for b in backends)):
            return reason
    return None
