"""One artifact for several input sizes: the size sets a tune is asked for, each tuned, then assembled.

A model whose inputs vary in size from call to call (an OCR line's width, a detector's image) is tuned for
each *size set* (every input's full shape) by the ordinary single-size tune, into ``sizes/000``,
``sizes/001``, ... of one multi-size artifact; the original model goes beside them as ``dynamic/model.onnx``
for the sizes that were not tuned (:mod:`collage.runtime.multisize` reads it and picks the plan by the
feeds' shapes). The cost DB keys candidates by structural fingerprint, so a subgraph whose shapes are the
same at two sizes is measured once.

The size sets are asked for as ``--shape x=1,3,48,{160,320,640}`` on the command line
(:func:`parse_size_sets`: braces list the values of one dimension; several braces, several inputs, make
the cross product; ``--shape`` given again for the same input lists more of its shapes) or as a list of
shape dicts from Python (:func:`size_sets`). The measuring budget is split evenly over the size sets.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collage.errors import ModelError, OptionError
from collage.graph.ir import parse_shapes
from collage.runtime.manifest import MANIFEST, collage_version
from collage.runtime.multisize import DYNAMIC_DIR, DYNAMIC_FILE, MULTI_SIZE_FORMAT, MULTI_SIZE_KIND, SIZES_DIR
from collage.util import say, sha256_file

if TYPE_CHECKING:
    import onnx

    from collage.tuner.options import TuneOptions

log = logging.getLogger(__name__)

SizeSet = dict[str, tuple[int, ...]]

_ITEM = re.compile(r"\{[^{}]*\}|[^,{}]+")


def _expand_spec(spec: str) -> tuple[str, list[tuple[int, ...]]]:
    """``NAME=1,3,48,{160,320}`` -> (NAME, [(1,3,48,160), (1,3,48,320)]): the cross product of its braces."""
    name, sep, dims = spec.rpartition("=")
    if "{" not in dims and "}" not in dims:
        ((key, shape),) = parse_shapes([spec]).items()
        return key, [shape]
    compact = dims.replace(" ", "")
    items = _ITEM.findall(compact)
    if not sep or not name or ",".join(items) != compact:
        raise ModelError(f"bad --shape {spec!r}: expected NAME=D1,D2,... where a dimension may be a set of sizes in "
                         "braces (for example x=1,3,48,{160,320,640})")
    choices = []
    for item in items:
        values = item[1:-1].split(",") if item.startswith("{") else [item]
        if not values or any(not v for v in values):
            raise ModelError(f"bad --shape {spec!r}: {item} lists no size (write sizes in braces, e.g. {{160,320}})")
        choices.append(values)
    shapes = []
    for combo in itertools.product(*choices):
        try:
            shapes.append(parse_shapes([f"{name}={','.join(combo)}"])[name])
        except ModelError as e:
            raise ModelError(f"bad --shape {spec!r}: " + str(e).split(": ", 1)[-1]) from None
    return name, shapes


def parse_size_sets(specs: Iterable[str]) -> list[SizeSet]:
    """The CLI's ``--shape`` values -> the size sets to tune, in order (one set, ``[{}]`` for none: the
    single-size tune). Braces list one dimension's sizes (their cross product within a value); a name given
    in several values lists more shapes of that input; inputs with several shapes combine as a cross product."""
    per_input: dict[str, list[tuple[int, ...]]] = {}
    for spec in specs:
        name, shapes = _expand_spec(spec)
        known = per_input.setdefault(name, [])
        known.extend(s for s in shapes if s not in known)
    names = list(per_input)
    return [dict(zip(names, combo)) for combo in itertools.product(*(per_input[n] for n in names))]


def size_sets(shapes: Mapping[str, Sequence[int]] | Sequence[Mapping[str, Sequence[int]]] | None) -> list[SizeSet]:
    """``collage.tune(shapes=...)``: one dict (one size set) or a list of dicts (one size set each) -> the sets,
    duplicates dropped; OptionError for anything else."""
    if shapes is None:
        return [{}]
    given = [shapes] if isinstance(shapes, Mapping) else shapes
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence) or not given:
        raise OptionError(f"tune: shapes must be a dict {{input: shape}} or a non-empty list of such dicts (one per "
                          f"size set), not {shapes!r}")
    out: list[SizeSet] = []
    for s in given:
        if not isinstance(s, Mapping):
            raise OptionError(f"tune: shapes lists {s!r}; each size set is a dict {{input name: [d1, d2, ...]}}")
        try:
            one = {str(k): tuple(int(d) for d in v) for k, v in s.items()}
        except (TypeError, ValueError):
            raise OptionError(f"tune: size set {dict(s)!r}: each shape is a list of integer sizes") from None
        if one not in out:
            out.append(one)
    return out


def describe(sizes: Mapping[str, Sequence[int]]) -> str:
    return " ".join(f"{k}=[{','.join(str(d) for d in v)}]" for k, v in sizes.items()) or "(the model's own sizes)"


@dataclass
class MultiSizeResult:
    """What ``tune`` returns for several size sets: the artifact and each size set's
    :class:`collage.tuner.result.TuneResult` (its ``out_dir`` the sub-artifact ``OUT/sizes/NNN``)."""

    out_dir: Path
    sizes: list[SizeSet]
    results: list[Any]

    @property
    def artifact(self) -> str:
        return str(self.out_dir)

    def to_dict(self) -> dict[str, Any]:
        """``collage tune --json`` of a multi-size tune: the artifact and, per size set, its inputs and the
        single-size result object."""
        return {"artifact": str(self.out_dir), "kind": MULTI_SIZE_KIND,
                "sizes": [{"inputs": {k: list(v) for k, v in s.items()}, **r.to_dict()}
                          for s, r in zip(self.sizes, self.results)]}

    def to_json(self, **kw: Any) -> str:
        import json
        return json.dumps(self.to_dict(), **kw)


def run_tune_sizes(model: str | os.PathLike | onnx.ModelProto, out_dir: str | os.PathLike, options: TuneOptions,
                   sets: Sequence[SizeSet], run_tune: Callable[..., Any]) -> MultiSizeResult:
    """Tune ``model`` for each size set with ``run_tune(model, out_dir, options)`` (collage.tuner.job's: the
    single-size tune; ``options`` with that set's shapes and 1/n of the budget) and write one multi-size artifact
    at ``out_dir`` (:mod:`collage.runtime.multisize`). Built in a hidden folder beside it and renamed into place
    when complete, as a single-size export is."""
    from collage.tuner.export import write_archive, write_json
    from collage.tuner.outdir import carry_over, inspect_output, install, staging_dir, warn_kept

    where = inspect_output(out_dir, archive=options.archive)  # before any work (collage.tuner.outdir)
    out = where.out
    source = _resolve(model)
    n = len(sets)
    budget_s = None if options.budget_s is None else options.budget_s / n
    tmp = staging_dir(where)
    try:
        results = []
        for k, sizes in enumerate(sets):
            say(options.progress, "size set %d/%d: %s", k + 1, n, describe(sizes), logger=log)
            sub_options = dataclasses.replace(options, shapes=sizes, budget_s=budget_s, archive=False)
            results.append(run_tune(source, tmp / SIZES_DIR / f"{k:03d}", sub_options))
        dynamic = _write_dynamic_model(source, tmp / DYNAMIC_DIR)
        renamed = carry_over(where, tmp)  # the user's files in an earlier artifact there
        write_json(tmp / MANIFEST, _manifest(tmp, options, results, dynamic))  # last: complete
        install(tmp, where)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    warn_kept(where, renamed)
    if options.archive:
        write_archive(out)
    for k, r in enumerate(results):
        r.out_dir = out / SIZES_DIR / f"{k:03d}"
    say(options.progress, "wrote %s: %d size sets and the dynamic model for other sizes", out, n, logger=log)
    return MultiSizeResult(out, [dict(s) for s in sets], results)


def _resolve(model: str | os.PathLike | onnx.ModelProto) -> str | onnx.ModelProto:
    if isinstance(model, (str, os.PathLike)):
        from collage import zoo
        return zoo.resolve(os.fspath(model))
    return model


def _write_dynamic_model(source: str | onnx.ModelProto, folder: Path) -> dict[str, Any]:
    """The original model, its dynamic dimensions as they are and its intermediate size hints (value infos) dropped,
    as ``folder/model.onnx`` (weights inside it);
    the manifest's entry for it: file, checksum, and the inputs / outputs with their symbolic dimensions."""
    import onnx

    from collage.graph.load import copy_model, read_model

    model, _ = read_model(source)
    if model.graph.value_info:  # an exporter's size hints may hold its example's size (collage.graph.load)
        model = copy_model(model)
        del model.graph.value_info[:]
    folder.mkdir(parents=True)
    path = folder / DYNAMIC_FILE
    onnx.save_model(model, str(path))
    inits = {t.name for t in model.graph.initializer}
    return {"dir": DYNAMIC_DIR,
            "files": [{"name": DYNAMIC_FILE, "sha256": sha256_file(path), "bytes": path.stat().st_size}],
            "inputs": [_value_entry(v) for v in model.graph.input if v.name not in inits],
            "outputs": [_value_entry(v) for v in model.graph.output]}


def _value_entry(v: onnx.ValueInfoProto) -> dict[str, Any]:
    """{name, shape: a size, a symbol's name or null per dimension, dtype}."""
    from onnx import helper

    tt = v.type.tensor_type
    dims = ([d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
            if tt.HasField("shape") else None)
    return {"name": v.name, "shape": dims, "dtype": helper.tensor_dtype_to_np_dtype(tt.elem_type).name}


def _manifest(root: Path, options: TuneOptions, results: Sequence[Any], dynamic: dict) -> dict[str, Any]:
    """manifest.json of a multi-size artifact (schema: :mod:`collage.runtime.multisize`)."""
    import json

    entries = []
    model: dict[str, Any] = {}
    for k in range(len(results)):
        rel = f"{SIZES_DIR}/{k:03d}"
        sub = json.loads((root / rel / MANIFEST).read_text())
        model = model or sub["model"]
        entries.append({"dir": rel, "inputs": {s["name"]: s["shape"] for s in sub["inputs"]}})
    return {"format_version": MULTI_SIZE_FORMAT, "kind": MULTI_SIZE_KIND, "collage_version": collage_version(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "target": options.target,
            "model": {k: v for k, v in model.items() if k != "nodes"}, "sizes": entries, "dynamic": dynamic}


__all__ = ["MultiSizeResult", "describe", "parse_size_sets", "run_tune_sizes", "size_sets"]
