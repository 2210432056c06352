"""The Step-by-step page's parts that outgrew ``views/steps.py``: sampling (``draws``, pure; ``sampling``, the
page's section)."""
