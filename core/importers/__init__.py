"""Importers: turn third-party translation models into core checkpoint folders.

Marian C++ binary models and Bergamot's (``marian_format``, ``bergamot``, ``bergamot_wheel``); local Hugging Face
folders through one family table, one folder reader and one convert (``hf_families``), each family's own steps in
``hf_marian``, ``hf_t5`` and ``hf_bart`` (their config translations in ``hf_*_config``), what every family shares in
``hf_folder``, ``hf_common``, ``hf_card`` and ``hf_entry``. The commands that run them are in ``core.cli``.
"""
