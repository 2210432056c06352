"""The server entry (``make run``): the lab's Streamlit app behind one middleware that answers page paths.

    streamlit run viz_app/asgi.py

``viz_app/page_paths.py`` says why (a page path opened directly made the frontend probe two missing URLs).
``streamlit run viz_app/app.py`` runs the same app bare, with those console 404s.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `streamlit run viz_app/asgi.py` puts only viz_app/ on the path
    sys.path.insert(0, str(REPO))

import streamlit as st  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402

from viz_app.page_paths import PagePaths  # noqa: E402

app = st.App("app.py", middleware=[Middleware(PagePaths)])  # app.py beside this file
