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
    "bench": ("collage.commands.bench", "tuned plan vs every single backend, written to results/bench/"),
    "measure": ("collage.commands.measure", "measure candidates of a model into the cost database"),
    "backends": ("collage.commands.backends", "list backends: available or why not, version, device, precision"),
    "zoo": ("collage.commands.zoo", "list the built-in models (zoo:NAME); fetch the real family's"),
    "annotate": ("collage.commands.annotate", "write the model with each node's backend, precision and partition "
                                              "in its metadata (for Netron)"),
}


#: the commands that measure into the cost database (what an interrupt leaves there is said)
MEASURING = ("tune", "measure", "bench")

DESCRIPTION = ("Measure which backend (ONNX Runtime, OpenVINO, TVM, ...) runs each part of an ONNX model "
               "fastest, search the cheapest assignment, and ship it as an artifact with a report.")
EPILOG = ("typical use: collage tune model.onnx -o out/ --budget 10m; collage report out/; "
          "collage run out/ --input x.npy. `collage COMMAND --help` for each command's options.")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default, except where there is none to show (None, False, empty) or the help
    text already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, [], "", argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def _global_flags(p: argparse.ArgumentParser, defaults: bool) -> None:
    """-v/--quiet, accepted before and after the subcommand (after it, they only override what was given)."""
    p.add_argument("-v", "--verbose", action="count", default=0 if defaults else argparse.SUPPRESS,
                   help="more logging (-vv for debug)")
    p.add_argument("-q", "--quiet", action="store_true", default=False if defaults else argparse.SUPPRESS,
                   help="no progress bars or progress lines; errors and warnings only")


def _all_parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for p in action.choices.values():
                yield from _all_parsers(p)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    from collage import __version__
    from collage.extras import missing_extra

    parser = argparse.ArgumentParser(prog="collage", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=HelpFormatter)
    _global_flags(parser, True)
    parser.add_argument("--version", action="version", version=f"collage {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in COMMANDS.items():
        if only is None or only == name:
            try:
                add_arguments = importlib.import_module(module).add_arguments
            except ImportError as e:  # an extra is missing: say so, or fail with it for the command asked for
                err = missing_extra(e, "this command")
                if err is None or only == name:
                    raise err or e  # noqa: B904 (err is None: e itself, which `from e` would make its own cause)
                sub.add_parser(name, help=f"{help_text} [needs: {str(err).split(': ', 1)[-1]}]")
                continue
            add_arguments(sub.add_parser(name, help=help_text, description=help_text, formatter_class=HelpFormatter))
        else:
            sub.add_parser(name, help=help_text, description=help_text)
    for p in _all_parsers(parser):  # subcommands and theirs (zoo list): the global flags, defaults shown
        p.formatter_class = HelpFormatter
        if p is not parser:
            _global_flags(p, False)
    return parser


class LineFormatter(logging.Formatter):
    """collage's own warnings read like its progress lines (``collage: warning: ...``); other records (-v's
    info and debug, other libraries' warnings) keep the level and the logger's name."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if record.levelno >= logging.WARNING and record.name.split(".")[0] == "collage":
            return f"collage: {record.levelname.lower()}: {record.getMessage()}"
        return super().format(record)


_fork_hook = False


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that the same cleanup runs (temp folders, claims, workers)."""


def _on_sigterm(signum: int, frame: object) -> None:  # noqa: ARG001 - signal handler signature
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Terminated()


def _interrupted(command: str, e: KeyboardInterrupt) -> int:
    """The one line (and exit code: 143 for SIGTERM, 130 for Ctrl-C) of an interrupted ``command``."""
    kept = ("; finished measurements are kept in the cost database (the same command goes on from them), "
            "temporary files removed") if command in MEASURING else ""
    name = f"collage {command}" if command else "collage"
    if isinstance(e, Terminated):
        print(f"{name}: terminated (SIGTERM){kept}", file=sys.stderr)
        return 143
    print(f"{name}: interrupted{kept}", file=sys.stderr)
    return 130


def main(argv: list[str] | None = None) -> int:
    from collage.errors import CollageError
    from collage.extras import MissingExtra, missing_extra

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
    try:
        args = build_parser(chosen).parse_args(argv)
    except MissingExtra as e:
        print(f"collage {chosen}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # while the command's modules load (seconds on a busy machine)
        return _interrupted(chosen or "", e)
    level = logging.ERROR if args.quiet and not args.verbose else logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # the one basicConfig made on stderr
        if isinstance(handler, logging.StreamHandler) and handler.stream in (sys.stderr, sys.__stderr__):
            handler.setFormatter(LineFormatter())
    try:
        try:
            return int(importlib.import_module(COMMANDS[args.command][0]).run(args) or 0)
        except ImportError as e:  # a lazily imported part of an extra that is not installed
            raise missing_extra(e, "this command") or e  # noqa: B904 (as above: it may be e itself)
    except CollageError as e:
        print(f"collage {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (Terminated)
        return _interrupted(args.command, e)
    except BrokenPipeError:  # `collage report OUT | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
