"""The "Why this word?" page's tabs, one module each (head importance, rollout, patching, attribution), and what
they share: the analyses a session computed for its export (``analysis_store``) and the tabs' common parts
(``common``). The page, views/explain.py, only picks the open tab and calls its ``tab(out)``."""
