"""Exporters: write core checkpoints in other tools' formats (a Hugging Face Marian folder, a CTranslate2 model).

Each exporter module exposes ``add_arguments(parser)`` and ``run(args) -> int`` and is registered as a
``python -m core`` sub-command in ``core.cli.EXTERNAL``; none imports transformers or ctranslate2 at import time.
"""
