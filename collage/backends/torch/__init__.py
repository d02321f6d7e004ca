"""PyTorch on CUDA: the backend (:mod:`.backend`), its op table (:mod:`.ops`) and what an op builder works
with (:mod:`.opnode`)."""
