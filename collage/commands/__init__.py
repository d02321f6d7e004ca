"""One module per ``collage`` subcommand, each with ``add_arguments(parser)`` and ``run(args) -> int``;
:mod:`collage.cli` wires them. Nothing imports this package but the CLI."""
