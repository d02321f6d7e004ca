"""Precision as a searched dimension under an accuracy budget: the strategy the job calls at fixed points
(:mod:`.strategy`: ``Fp32Only`` without a budget), the tuner (:mod:`.tuner`), its budgeted search
(:mod:`.search`) and the errors of lower-precision ranges at the model's outputs (:mod:`.output_errors`).
The lower-precision backend variants themselves live in :mod:`collage.backends.openvino.lowp`."""
