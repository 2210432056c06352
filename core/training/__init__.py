"""Training tooling: the Ding corpus, token-count batching, the trainer, the ``train`` recipes, evaluation, publishing.

``python -m core train`` runs ``recipes``, ``eval`` runs ``evaluate`` and ``publish`` runs ``publish``: the commands
themselves (their flags and printing) are in ``core.cli``.
"""
