"""The steps of a tune, each a function of the tune's context (:class:`collage.tuner.context.JobContext`) and
the records of the steps before it, returning its own record (:mod:`collage.tuner.records`):

- :mod:`.candidates`: what each backend takes, the candidates in measuring order -> ``Candidates``;
- :mod:`.measure`: their measured costs within the budget (guided, or with a TVM tuning budget) -> ``Measured``;
- :mod:`.baselines`: every single backend on the whole model, and the switch costs -> ``Baselines``;
- :mod:`.search`: the search with measured partition charges, checked by measurement -> ``Searched``;
- :mod:`.verify`: the plan against the baselines, interleaved; never worse -> ``Verified``;
- :mod:`.refine`: measured trials around the plan -> ``Refined``;
- :mod:`.finish`: the numerics -> ``FinalCheck``; the artifact written.

:mod:`.budget` says what fits the tune's clock at each step. :class:`collage.tuner.job.TuneJob` sequences them;
the report is assembled from the records at the end (:func:`collage.tuner.assemble.assemble_report`).
"""
