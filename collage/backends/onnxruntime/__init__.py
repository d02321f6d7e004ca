"""ONNX Runtime: the CPU backend (:mod:`.backend`), its runtime side shared with the linker (:mod:`.session`:
the lazy import, the process-wide pool, plain sessions, ``OrtCompiled``), linked partitions handing NCHWc
tensors over (:mod:`.link`), the residual-routing rewrites (:mod:`.route`) and the CUDA execution provider
(:mod:`.cuda`)."""
