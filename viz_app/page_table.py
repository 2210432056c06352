"""The lab's pages as data: key (the ``?page=`` value and the URL path), view file, title, icon.

Read by ``app.py`` (which builds the ``st.Page`` objects) and by ``asgi.py`` (which answers the page paths before
the frontend loads); no Streamlit import, so the server entry can read it without running the app script.
"""

from __future__ import annotations

from typing import NamedTuple


class PageRow(NamedTuple):
    key: str  # ?page= value and URL path (the overview is at the root)
    view: str  # module under viz_app/views/
    title: str
    icon: str  # Material icon name (shipped with the frontend; nothing is fetched)


PAGE_ROWS: tuple[PageRow, ...] = (
    PageRow("overview", "overview", "Translate & overview", "translate"),
    PageRow("head", "head_detail", "Head detail", "zoom_in"),  # views/head_detail.py, not views/heads.py
    PageRow("masks", "masks", "Masks", "grid_on"),
    PageRow("positional", "positional", "Positional encoding", "waves"),
    PageRow("steps", "steps", "Step-by-step decoding", "play_circle"),
    PageRow("explain", "explain", "Why this word?", "psychology_alt"),
    PageRow("heads", "heads", "What does each head do?", "category"),
    PageRow("corpus", "corpus", "Corpus", "dataset"),
    PageRow("compare", "compare", "Compare two runs", "compare_arrows"),
    PageRow("learn", "learn", "Learn: attention by hand", "calculate"),
    PageRow("map", "model_map", "Model map", "account_tree"),
)
PAGE_KEYS: frozenset[str] = frozenset(row.key for row in PAGE_ROWS)
