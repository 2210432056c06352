"""Knowledge distillation: the Bergamot en->pt teacher into a student with decoder self-attention.

``student`` builds, trains and evaluates the student (``python -m core distill``), ``data`` makes the teacher's
translations, ``card`` writes the published checkpoint's card.
"""
