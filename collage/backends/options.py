"""A backend constructor's options as one frozen dataclass (``takes_options``).

A backend with many constructor options (ONNX Runtime's threading and spinning, TVM's tuning and timeouts)
declares them as the fields of a frozen dataclass and writes ``__init__(self, options)`` under
``@takes_options(ThatDataclass)``. Callers keep passing keywords, as the command line and the measurement
worker do (``get_backend("onnxruntime", shared_pool=False)``, ``resolve_backend(name, options_dict)``):
the decorator builds the dataclass from them (a ``TypeError`` naming the backend and the unknown keyword, as
a plain signature would) and hands it to ``__init__``. ``inspect.signature(Backend.__init__)`` lists the
fields as keyword parameters with their defaults, so what reads a constructor's parameters reads them as
before: ``collage.backends.option_names`` / ``check_options`` (``--backend-option`` validation), the
artifact loader's recorded settings.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def signature_of(options_type: type) -> inspect.Signature:
    """``(self, *, field=default, ...)``: the constructor signature a dataclass of options stands for."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for f in dataclasses.fields(options_type):
        default = f.default if f.default is not dataclasses.MISSING else inspect.Parameter.empty
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=f.type))
    return inspect.Signature(params, return_annotation="None")


def takes_options(options_type: type[T]) -> Callable[[Callable[[Any, T], None]], Callable[..., None]]:
    """Decorate ``__init__(self, options: options_type)`` so that it is called with the options as keywords."""
    names = {f.name for f in dataclasses.fields(options_type)}

    def decorate(init: Callable[[Any, T], None]) -> Callable[..., None]:
        @functools.wraps(init)
        def keywords(self: Any, **options: Any) -> None:
            unknown = sorted(set(options) - names)
            if unknown:
                raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {unknown[0]!r}")
            init(self, options_type(**options))

        keywords.__signature__ = signature_of(options_type)  # type: ignore[attr-defined]
        return keywords

    return decorate
