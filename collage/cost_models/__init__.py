"""The learned cost model: what an unmeasured candidate would cost, predicted from what was measured.

    features.py     candidate_features: a candidate subgraph as numbers, before it runs
    learned.py      LearnedCostModel: one model per backend variant, trained on the cost DB's measurements

Measuring itself (worker processes, the executor, the cost DB) is :mod:`collage.measure`; this package only
reads what it stored.
"""
