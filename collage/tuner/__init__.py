"""The tuning job: named steps over a model (:mod:`.job`), the search with the measured per-partition
overhead (:mod:`.search_step`), verification (:mod:`.verify`), export of the artifact (:mod:`.export`),
the bench (:mod:`.bench`) and the accuracy-budgeted precision search (:mod:`.precision`)."""
