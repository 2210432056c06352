"""Training tooling: the Ding corpus, token-count batching, the trainer, the ``train`` recipes, evaluation, publishing.

``python -m core train`` runs ``recipes``, ``eval`` runs ``evaluate`` and ``publish`` runs ``publish``; each exposes
``add_arguments(parser)`` and ``run(args) -> int`` and is registered in ``core.cli.EXTERNAL``.
"""
