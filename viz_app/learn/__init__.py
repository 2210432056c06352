"""The Learn page's parts: ``walkthrough`` recomputes one attention sub-layer by hand from the recorded residual
stream and the model's weights (no Streamlit), ``tables`` shows numbers and verdicts, ``sections`` draws the page's
numbered steps. The page, views/learn.py, picks the query and calls the sections in order."""
