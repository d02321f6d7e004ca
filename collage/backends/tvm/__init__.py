"""Apache TVM (relax): the backend (:mod:`.backend`), the worker process that compiles and runs TVM code
(:mod:`.worker`; TVM can abort), MetaSchedule tuning (:mod:`.tuning`; its options passed in, no module
globals) and the build options both read (:mod:`.options`)."""
