"""Fuzzing the text entry points with hypothesis: any string either translates or raises InputError."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import core
from core import InputError, clean_text


@given(st.text(max_size=200))
@settings(max_examples=300, deadline=None)
def test_clean_text_never_returns_control_characters_or_empty(text):
    try:
        cleaned = clean_text(text)
    except InputError as exc:
        assert "empty" in str(exc)
        return
    assert cleaned and cleaned == cleaned.strip()
    assert not any(ord(ch) < 32 or 0x7F <= ord(ch) < 0xA0 for ch in cleaned)


@given(st.text(alphabet=st.characters(codec="utf-8"), min_size=0, max_size=60))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_translate_any_text_gives_a_result_or_input_error(tiny_checkpoint, text):
    bundle = _bundle(tiny_checkpoint)
    try:
        out = bundle.translate(text, max_len=4, truncate=True)
    except InputError:
        return
    assert isinstance(out.text, str)
    np.testing.assert_allclose(out.trace.attention("encoder", 0).sum(-1), 1.0, atol=1e-5)


_CACHE: dict = {}


def _bundle(path):
    if path not in _CACHE:
        _CACHE[path] = core.load(path, device="cpu")
    return _CACHE[path]
