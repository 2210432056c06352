"""Exporters: write core checkpoints in other tools' formats (a Hugging Face Marian folder, a CTranslate2 model).

Typed functions only; the commands that run them (``export-hf``, ``export-ct2``) are in ``core.cli``. None imports
transformers or ctranslate2 at import time.
"""
