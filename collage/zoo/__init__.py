"""Models the project builds itself (never downloaded): the catalog (:mod:`.catalog`: names, cached paths;
``random_inputs`` is collage.graph.inputs' rule, re-exported), the hand-built models (:mod:`.models`) and the
onnx package's light architectures (:mod:`.light`). Used by tests, the demo and benchmarks; no layer of the
tool imports it but the tuner (to resolve ``zoo:NAME``) and the commands."""
from __future__ import annotations

from collage.zoo.catalog import (ENTRIES, ZOO, ZOO_VERSION, ZooEntry, cached_path, is_built, load_graph, load_model, model_path, names,
                                 random_inputs, resolve, zoo_dir)

__all__ = ["ENTRIES", "ZOO", "ZOO_VERSION", "ZooEntry", "cached_path", "is_built", "load_graph", "load_model", "model_path", "names",
           "random_inputs", "resolve", "zoo_dir"]
