"""OpenVINO: the CPU backend (:mod:`.backend`), its runtime side shared with the linker (:mod:`.compiled`: the
one ``ov.Core``, ``OVCompiled``, port helpers), linked partitions in the plugin's channels-last layout
(:mod:`.link`) and the lower-precision variants bf16 / fp16 (:mod:`.lowp`, registered from there: loading a
bf16 artifact imports no tuner)."""
