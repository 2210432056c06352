"""make test's scheduling (tests/conftest.py): every browser file is one xdist scope, so one worker starts the app
server and Chromium once; every other file is its own scope, as --dist loadfile makes it."""

from conftest import BROWSER_GROUP, _BrowserFilesTogether


def _scope(nodeid: str) -> str:
    scheduler = object.__new__(_BrowserFilesTogether)  # _split_scope reads only the node id
    return scheduler._split_scope(nodeid)


def test_browser_files_share_one_scope_and_other_files_keep_their_own() -> None:
    browser = [
        "tests/viz_app/test_browser.py::test_type_translate_and_toggle_positional_encoding",
        "tests/viz_app/test_browser_claims.py::test_what_the_pages_say_agrees_with_the_runs[tiny]",
        "tests/viz_app/test_browser_guard.py::test_safe_from_any_folder_and_refused_when_made_unsafe_or_reached",
    ]
    assert {_scope(n) for n in browser} == {BROWSER_GROUP}
    assert _scope("tests/viz_app/test_guard.py::test_local_host_names_pass[localhost]") == "tests/viz_app/test_guard.py"
    assert _scope("tests/core/test_fast.py::test_x[1-float16]") == "tests/core/test_fast.py"
