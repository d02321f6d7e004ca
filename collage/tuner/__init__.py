"""The tuning job, which composes the layers: ``tune`` (:mod:`.job`) over a ``TuneOptions`` (:mod:`.options`);
``TuneJob`` sequences the steps (:mod:`.steps`), each a function of the tune's context (:mod:`.context`) returning
a record (:mod:`.records`), and report.json is assembled from the records (:mod:`.assemble`). Beside them: the
search with the measured per-partition overhead (:mod:`.stitching`), verification (:mod:`.checks`), export of
the artifact (:mod:`.export`), the bench (:mod:`.bench`) and precision as a strategy (:mod:`.precision`: a no-op
for fp32, the accuracy-budgeted search otherwise). No layer below imports this package."""
