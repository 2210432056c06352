"""viz_app/page_paths.py (mounted by viz_app/asgi.py): which requests it answers, and where it sends them."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from viz_app.page_paths import PagePaths, page_redirect
from viz_app.page_table import PAGE_KEYS


@pytest.mark.parametrize("page", sorted(PAGE_KEYS))
def test_every_page_path_goes_to_the_root_with_its_page(page: str) -> None:
    assert page_redirect(f"/{page}", "") == f"/?page={page}"
    assert page_redirect(f"/{page}/", "ckpt=tiny") == f"/?page={page}&ckpt=tiny"


def test_the_paths_page_wins_and_the_other_values_keep_their_order() -> None:
    target = page_redirect("/masks", "text=Der+Hund+%26+die+Katze.&page=steps&pe=0&pe=1&empty=")
    assert target is not None
    parts = urlsplit(target)
    assert parts.path == "/"
    assert parse_qsl(parts.query, keep_blank_values=True) == [
        ("page", "masks"),
        ("text", "Der Hund & die Katze."),
        ("pe", "0"),
        ("pe", "1"),
        ("empty", ""),
    ]


@pytest.mark.parametrize(
    "path",
    ["/", "", "/_stcore/health", "/masks/_stcore/health", "/static/js/x.js", "/nope", "/masks/extra", "/Masks"],
)
def test_other_paths_pass_through(path: str) -> None:
    assert page_redirect(path, "page=masks") is None


def test_a_base_url_path_is_kept() -> None:
    assert page_redirect("/lab/masks", "ckpt=x", base="lab") == "/lab/?page=masks&ckpt=x"
    assert page_redirect("/masks", "", base="lab") is None  # outside the app's base path
    assert page_redirect("/lab/", "", base="lab") is None


def test_the_middleware_redirects_gets_only() -> None:
    inner = Starlette(routes=[Route("/{rest:path}", lambda r: PlainTextResponse("app"), methods=["GET", "POST"])])
    client = TestClient(PagePaths(inner), follow_redirects=False)
    r = client.get("/steps?text=Hi")
    assert r.status_code == 307 and r.headers["location"] == "/?page=steps&text=Hi"
    assert client.get("/_stcore/health").text == "app"
    assert client.post("/steps").text == "app"  # not a page load


def test_text_in_any_script_survives_the_redirect() -> None:
    target = page_redirect("/steps", "text=Ol%C3%A1%2C+mundo%21+%D9%85%D8%B1%D8%AD%D8%A8%D8%A7")
    assert target is not None
    assert dict(parse_qsl(urlsplit(target).query))["text"] == "Olá, mundo! مرحبا"
