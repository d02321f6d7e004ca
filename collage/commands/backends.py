"""``collage backends``: each backend, available or why not, version, device, precision."""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass

from collage import backends
from collage.backends import VARIANTS, backend_names, get_backend
from collage.errors import BackendUnavailable, CollageError


@dataclass
class BackendStatus:
    name: str
    device: str
    available: bool
    reason: str | None
    version: str | None
    precision: str | None


def backend_status(name: str) -> BackendStatus:
    device = (backends.REGISTRY.get(name) or VARIANTS[name])[1]  # read now: tests swap the registry
    try:
        backend = get_backend(name)
    except (BackendUnavailable, CollageError) as e:
        return BackendStatus(name, device, False, str(e), None, None)
    reason = backend.available()
    version = None
    if reason is None:
        try:
            version = backend.version()
        except Exception as e:  # noqa: BLE001 - report, do not crash the listing
            reason = f"version() failed: {e}"
    return BackendStatus(name, device, reason is None, reason, version, getattr(backend, "precision", None))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all",
                        help="which backends to list (default: all)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    device = None if args.device == "all" else args.device
    statuses = [backend_status(n) for n in backend_names(device)]
    statuses += [backend_status(n) for n, (_, d) in VARIANTS.items() if device is None or d == device]
    if args.json:
        print(json.dumps([asdict(s) for s in statuses], indent=2))
        return 0
    rows = [(s.name, s.device, "yes" if s.available else "no", s.version or "-", s.precision or "-",
             s.reason or "") for s in statuses]
    head = ("backend", "device", "available", "version", "precision", "why not")
    widths = [max(len(str(r[k])) for r in [head, *rows]) for k in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0
