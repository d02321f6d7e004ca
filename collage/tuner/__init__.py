"""The tuning job, which composes the layers: ``tune`` as named steps of ``TuneJob`` (:mod:`.job`) over a
``TuneOptions`` (:mod:`.options`), the search with the measured per-partition overhead (:mod:`.search_step`),
verification (:mod:`.verify`), export of the artifact (:mod:`.export`), the bench (:mod:`.bench`) and
precision as a strategy (:mod:`.precision`: a no-op for fp32, the accuracy-budgeted search otherwise).
No layer below imports this package."""
