"""Page paths answered before the frontend loads: ``/masks`` -> ``/?page=masks`` (the middleware ``asgi.py`` mounts).

Opened directly at a page path (``/masks``, a reload, a bookmark), Streamlit's frontend cannot tell the app's base
path from the page's, so it first probes ``/masks/_stcore/health`` and ``/masks/_stcore/host-config`` — two 404s in
the browser's console before it finds the root (upstream streamlit#7074). A page path is therefore answered with a
redirect to the root carrying ``?page=masks`` and the link's other values, the lab's own link format; app.py opens
that page. Every other request passes through untouched.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

import streamlit as st
from starlette.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from viz_app.page_table import PAGE_KEYS


def page_redirect(path: str, query: str, base: str = "") -> str | None:
    """Where a request for ``path`` (with ``query``) is sent, or None when it is not a page path.

    ``base`` is ``server.baseUrlPath`` (no slashes at its ends). The path's page replaces any ``page=`` in the
    query; the other values keep their order.
    """
    prefix = f"/{base}" if base else ""
    if prefix and not path.startswith(prefix + "/"):
        return None
    page = path[len(prefix) :].strip("/")
    if page not in PAGE_KEYS:
        return None
    rest = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "page"]
    return f"{prefix}/?{urlencode([('page', page), *rest])}"


class PagePaths:
    """ASGI middleware: a GET or HEAD of a page path gets a 307 to the root with ``?page=`` (see the module doc)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method") in ("GET", "HEAD"):
            base = str(st.get_option("server.baseUrlPath") or "").strip("/")
            target = page_redirect(scope["path"], scope.get("query_string", b"").decode("latin-1"), base)
            if target is not None:
                await RedirectResponse(target, status_code=307)(scope, receive, send)
                return
        await self.app(scope, receive, send)
