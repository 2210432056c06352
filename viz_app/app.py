"""Transformer Attention Lab — the Streamlit entry point: page config, sidebar, navigation.

Run with ``make run`` (``streamlit run viz_app/asgi.py``: this script behind a middleware that answers page
paths); ``streamlit run viz_app/app.py`` runs it bare. The pages live in ``viz_app/views``;
figures in ``viz_app/figures/``; the state (links, cached runs, checkpoints, replay) in ``viz_app/session/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `streamlit run viz_app/app.py` puts only viz_app/ on the path
    sys.path.insert(0, str(REPO))

import streamlit as st  # noqa: E402
import torch  # noqa: E402

from viz_app import guard  # noqa: E402
from viz_app.page_table import PAGE_ROWS  # noqa: E402
from viz_app.session import checkpoints, server, url  # noqa: E402
from viz_app.widgets import presentation, sidebar  # noqa: E402

# The server's thread count, set here at its entry and nowhere else (loading a model changes nothing global):
# one sentence at a time is translated per session, and more threads mostly contend on a small machine.
if torch.get_num_threads() != server.threads():
    torch.set_num_threads(server.threads())
url.init()  # the link's values first: the page's config follows the presentation setting
# the icon ships with the app (a ":material/..." or emoji page icon makes the browser fetch an image from a CDN)
st.set_page_config(
    page_title="Transformer Attention Lab",
    page_icon=str(REPO / "viz_app" / "icon.png"),
    layout="wide",
    initial_sidebar_state=presentation.sidebar_state(),
)

# Safe however it was started: loopback, no usage statistics, a local Host name (see viz_app/guard.py). A refused
# session gets no widget at all, so no message it sends can load anything.
_refusal = guard.settings_problem(
    st.get_option("server.address"), bool(st.get_option("browser.gatherUsageStats"))
) or guard.host_problem(st.context.headers.get("Host"))
if _refusal:
    st.error(_refusal, icon=":material/gpp_bad:")
    st.stop()

PAGES = {  # key (also the ?page= value) -> page; the URL path is the key too, but the overview's is the root
    row.key: st.Page(
        f"views/{row.view}.py",
        title=row.title,
        icon=f":material/{row.icon}:",
        url_path=row.key if row.key != "overview" else "overview-at-root",  # a default page reserves its path unused
        default=row.key == "overview",
    )
    for row in PAGE_ROWS
}


def _overview_by_name() -> None:
    """/overview, typed or kept from an old link: the overview lives at the root path (Streamlit gives the default
    page no path of its own and showed "Page not found" first), so go there with the link's values."""
    st.switch_page(PAGES["overview"], query_params=st.query_params.to_dict())


# hidden from the menu: only answers the path
ALIASES = [st.Page(_overview_by_name, title="Translate & overview", url_path="overview", visibility="hidden")]

presentation.style_page()
server.warm_up()  # once per process: what the pages would import on their first visit
page = st.navigation([*PAGES.values(), *ALIASES], position="sidebar")
first = st.session_state.pop("_first_page", "")
if first in PAGES and page.url_path in ("", "overview") and first != "overview":
    st.switch_page(PAGES[first], query_params=st.query_params.to_dict())  # a link naming ?page=…
if first and first not in PAGES:
    url.note_link("page", first, "is not a page of the lab (the overview is shown)")

notice = st.empty() if url.link_pending() else None  # above the page: what of a link could not be used
if not sidebar.sidebar():  # no checkpoint, or it failed to load (the sidebar showed why), and no saved trace
    if not checkpoints.checkpoint_names():
        sidebar.no_checkpoint()
    if notice is not None:  # said now: the user's next action must not read this link's values
        url.show_link_problems(notice)
    st.stop()
try:
    page.run()
except Exception as exc:  # noqa: BLE001 — a generic box instead of a traceback (script control is BaseException)
    st.error(
        f"**This view failed** ({type(exc).__name__}): {exc}. Try another sentence or reset the switches.",
        icon=":material/bug_report:",
    )
finally:  # once per run, after the page (its widgets may change the state the URL mirrors), even after st.stop()
    if notice is not None:
        url.show_link_problems(notice)
    url.sync_url(page.url_path or "overview")
