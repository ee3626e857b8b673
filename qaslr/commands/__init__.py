"""All command-line code: one module per command (``qaslr <command>``), plus ``indexer``.

Nothing below this package imports it. Each ``qaslr`` command module exposes
``add_arguments(parser)`` and ``run(args) -> int`` and keeps its top level light (argparse only);
:mod:`qaslr.commands.indexer` is the ``indexer`` console script.
"""
