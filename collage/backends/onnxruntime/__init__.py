"""ONNX Runtime: the CPU backend (:mod:`.backend`), linked partitions handing NCHWc tensors over
(:mod:`.link`), the residual-routing rewrites (:mod:`.route`) and the CUDA execution provider (:mod:`.cuda`)."""
