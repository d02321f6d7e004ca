"""ONNX's own backend test suite run through collage: the backend adapter (backend) and the cases left out
(exclusions)."""
