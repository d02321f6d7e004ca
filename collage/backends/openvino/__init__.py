"""OpenVINO: the CPU backend (:mod:`.backend`), linked partitions in the plugin's channels-last layout
(:mod:`.link`) and the lower-precision variants bf16 / fp16 (:mod:`.lowp`)."""
