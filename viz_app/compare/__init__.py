"""The Compare page's parts: run B made from the session's ``*_b`` values (``runs``) and the presets that set them
(``presets``). The page, views/compare.py, shows A and B and what changed between them."""
