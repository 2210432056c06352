"""Widgets the pages share, one job per module:

- ``sidebar``: saved-trace replay, checkpoint picker and card, switches, heads switched off
- ``ablation``: the layer × head grid of switched-off heads
- ``sentence_bar``: the text box, examples and sentence picker every page opens with
- ``header``: the translation, its options, the teacher beside it, as trained beside switched
- ``teacher``: a distilled student's teacher beside it
- ``pickers``: attention kind, layer and head
- ``export``: charts with PNG export, the trace as JSON or NPZ
- ``markup``: text made literal for Markdown, differing words marked, pieces as inline code
"""
