"""Importers: turn third-party translation models into core checkpoint folders.

Each importer module exposes ``add_arguments(parser)`` and ``run(args) -> int`` and is
registered as a ``python -m core`` sub-command in ``core.cli.EXTERNAL``.
"""
