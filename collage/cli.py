"""The ``collage`` command.

Each subcommand is a module of :mod:`collage.commands` exposing two functions:
``add_arguments(parser)`` and ``run(args) -> int``. This file only wires them, imports each lazily
(so ``collage run`` never imports the tuner), and turns every ``CollageError`` into one line on
stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "tune": ("collage.commands.tune", "measure candidates, search the cheapest plan, write an artifact"),
    "report": ("collage.commands.report", "show what runs where in a tuned artifact, and why"),
    "run": ("collage.commands.run", "run a tuned artifact on inputs from .npy files"),
    "inspect": ("collage.commands.inspect", "op histogram, FLOPs, inputs/outputs (and --support per backend)"),
    "bench": ("collage.commands.bench", "tuned plan vs every single backend, written to results/"),
    "measure": ("collage.commands.measure", "measure candidates of a model into the cost database"),
    "backends": ("collage.commands.backends", "list backends: available or why not, version, device, precision"),
    "zoo": ("collage.commands.zoo", "list the built-in models (zoo:NAME)"),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="collage", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or only == name:
            importlib.import_module(module).add_arguments(p)
    return parser


_fork_hook = False


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that the same cleanup runs (temp folders, claims, workers)."""


def _on_sigterm(signum: int, frame: object) -> None:  # noqa: ARG001 - signal handler signature
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    from collage.errors import CollageError

    argv = sys.argv[1:] if argv is None else argv
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)
        # a child forked without exec (multiprocessing "fork", a library's telemetry) must keep the default:
        # a Python-level handler only runs between bytecodes, so a child stuck in C would ignore SIGTERM
        global _fork_hook
        if not _fork_hook:
            os.register_at_fork(after_in_child=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
            _fork_hook = True
    # only the chosen subcommand's module is imported (keeps `collage run` light)
    chosen = next((a for a in argv if a in COMMANDS), None)
    args = build_parser(chosen).parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(importlib.import_module(COMMANDS[args.command][0]).run(args) or 0)
    except CollageError as e:
        print(f"collage {args.command}: error: {e}", file=sys.stderr)
        return 2
    except Terminated:
        print(f"collage {args.command}: terminated (SIGTERM); finished measurements are kept in the cost "
              "database, temporary files removed", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print(f"collage {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `collage report OUT | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
