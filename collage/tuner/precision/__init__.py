"""Precision as a searched dimension under an accuracy budget: the tuner (:mod:`.tuner`), its budgeted
search (:mod:`.search`) and the errors of lower-precision ranges at the model's outputs (:mod:`.output_errors`)."""
