"""Every session key the app uses is declared in one place: ``PARAMS`` (what a link carries) or ``SESSION_KEYS``
(widgets and the app's own bookkeeping), both in viz_app/session/params.py. Read from the source, so a page that
starts using an undeclared key fails here, not by a collision on another page."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from viz_app.session.params import PARAMS, SESSION_KEYS

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted(p for p in (REPO / "viz_app").rglob("*.py") if "figures" not in p.parts)


def _template(node: ast.expr) -> str | None:
    """A literal key ('ablate'), or an f-string key as a template ('matrix_{}_{}'); None for any other expression."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _is_state(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "session_state") or (
        isinstance(node, ast.Name) and node.id == "ss"
    )


def keys_used(tree: ast.AST) -> set[str]:
    found: list[str | None] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            found += [_template(k.value) for k in n.keywords if k.arg == "key"]
            f = n.func
            if isinstance(f, ast.Attribute) and _is_state(f.value):
                if f.attr in ("get", "pop", "setdefault") and n.args:
                    found.append(_template(n.args[0]))
                if f.attr == "update":
                    found += [k.arg for k in n.keywords]
        elif isinstance(n, ast.Subscript) and _is_state(n.value):
            found.append(_template(n.slice))
        elif isinstance(n, ast.Compare) and any(isinstance(o, ast.In | ast.NotIn) for o in n.ops):
            if any(_is_state(c) for c in n.comparators):
                found.append(_template(n.left))
    return {k for k in found if k}


def _normalised(key: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", key)


def test_every_session_key_is_declared() -> None:
    declared = {_normalised(k) for k in [*PARAMS, *SESSION_KEYS]}
    undeclared = {
        f"{path.relative_to(REPO)}: {key}"
        for path in MODULES
        for key in keys_used(ast.parse(path.read_text(encoding="utf-8")))
        if _normalised(key) not in declared
    }
    assert not undeclared, sorted(undeclared)


def test_no_key_is_declared_twice_or_left_unused() -> None:
    assert not set(PARAMS) & set(SESSION_KEYS)
    used = {_normalised(k) for path in MODULES for k in keys_used(ast.parse(path.read_text(encoding="utf-8")))}
    # _replay is read through trace_replay.REPLAY, the grid's key through a variable
    assert not {_normalised(k) for k in SESSION_KEYS} - used - {"_replay", "matrix_{}_{}"}
