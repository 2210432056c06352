"""The Learn page's parts: ``walkthrough`` holds what core recorded around one attention sub-layer and the weights it
ran on, for the page's own arithmetic (no Streamlit), ``tables`` shows numbers and verdicts, ``sections`` draws the
page's numbered steps. The page, views/learn.py, picks the query and calls the sections in order."""
