"""The link: the first run reads ``PARAMS`` from the query parameters into ``st.session_state``, every run mirrors
them back into the address bar, and what of a link could not be used is said once, on its first page.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

import core
from viz_app.session.checkpoints import checkpoint_names
from viz_app.session.params import BEAMS, INDEX_PARAMS, PARAMS, head_label
from viz_app.session.trace_replay import replay


def init() -> None:
    """First run of a session: read the query parameters; later runs: keep every value alive across pages."""
    ss = st.session_state
    if "_initialised" not in ss:
        ss["_link_problems"], from_link = [], {}
        for name, param in PARAMS.items():
            value = param.default
            if name in st.query_params:
                raw = st.query_params[name]
                try:
                    parsed = param.parse(raw)
                    if param.choices and parsed not in param.choices:
                        raise ValueError(raw)
                    value, from_link[name] = parsed, raw
                except (ValueError, TypeError):  # a hand-edited link with a bad value: the default, said so
                    allowed = f" (choices: {', '.join(map(str, param.choices))})" if param.choices else ""
                    note_link(name, raw, f"could not be read{allowed}")
            ss[name] = value
        ss["_link_values"] = from_link
        ss["_initialised"] = True
        ss["_first_page"] = st.query_params.get("page", "")
    else:
        for name in PARAMS:
            if name in ss:
                ss[name] = ss[name]  # widgets of other pages would otherwise forget their value


def replay_link_values(saved: core.Translation, checkpoints: list[str]) -> dict[str, Any]:
    """What a link made while ``saved`` is replayed carries instead of the sidebar's values: its sentence, its
    switches and beam, and its model where that is a listed checkpoint (a link cannot carry the file itself, so
    it asks the model to make the same run again). Switches as the sidebar holds them (the inverse of
    ``options``)."""
    o = saved.options
    src, tgt = o.pe_on("src"), o.pe_on("tgt")
    values: dict[str, Any] = {
        "text": saved.source_text,
        "text2": "",
        "pe": src and tgt,
        "pe_side": "both" if src == tgt else "encoder" if not src else "decoder",
        "causal": o.causal_mask,
        "padding": o.padding_mask,
        "shortlist": o.shortlist,
        "ablate": sorted(head_label(k, l, h) for k, l, h in o.ablate),
        "beam": saved.beam_size if saved.beam_size in BEAMS else 1,
        "whatif": (),
    }
    model = str(saved.trace.meta.get("model", ""))
    values["ckpt"] = model if model in checkpoints else ""
    return values


def url_params(page: str) -> dict[str, str]:
    """The current state as query parameters (defaults left out, checkpoint and text always in); while a saved
    trace is replayed, the trace's sentence, switches and model instead of the sidebar's."""
    ss = st.session_state
    saved = replay()
    from_trace = replay_link_values(saved, checkpoint_names()) if saved is not None else {}
    out = {"page": page}
    for name, param in PARAMS.items():
        value = from_trace[name] if name in from_trace else ss.get(name, param.default)
        if name == "ckpt" and from_trace and not value:
            continue  # the trace's model is not a listed checkpoint: the link opens the default
        if name in ("ckpt", "text") or value != param.default:
            out[name] = param.dump(value)
    return out


def sync_url(page: str) -> None:
    """Mirror the state into the address bar so a copied link restores this view."""
    wanted = url_params(page)
    if st.query_params.to_dict() != wanted:
        st.query_params.from_dict(wanted)


def clamp(name: str, choices: list[Any]) -> None:
    """Before a widget is drawn: make sure its state is one of ``choices`` (e.g. after a checkpoint change); a
    value the page's link gave is reported (``show_link_problems``)."""
    if choices and st.session_state.get(name) not in choices:
        if name in INDEX_PARAMS and all(isinstance(c, int) for c in choices):
            allowed = f"{min(choices) + 1}–{max(choices) + 1}" if len(choices) > 1 else str(choices[0] + 1)
        else:
            allowed = ", ".join(map(str, choices[:8])) + (", …" if len(choices) > 8 else "")
        link_problem(name, f"is not available here (choices: {allowed})")
        st.session_state[name] = choices[0]


_SHOWN = 40  # characters of a link's value repeated in a message


def _shown(raw: str) -> str:
    text = raw if len(raw) <= _SHOWN else raw[:_SHOWN] + "…"
    return text.replace("`", "ˋ")


def note_link(name: str, raw: str, why: str) -> None:
    """Note that the link's ``name=raw`` cannot be used, and why (shown by ``show_link_problems``)."""
    st.session_state.setdefault("_link_problems", []).append(f"`{name}={_shown(raw)}` {why}")


def link_problem(name: str, why: str) -> None:
    """Note that the value the link gave ``name`` cannot be used (said once, on the link's first page)."""
    from_link = st.session_state.get("_link_values") or {}
    if name in from_link:
        note_link(name, from_link.pop(name), why)


def show_link_problems(slot: Any) -> None:
    """After the link's first page has run: what of the link could not be used, in ``slot``; then forget the link
    (later changes of checkpoint or sentence clamp values without a word, as they should)."""
    ss = st.session_state
    problems = ss.pop("_link_problems", None) or []
    ss.pop("_link_values", None)
    if problems:
        slot.warning(
            "**Parts of this link could not be used**, so their defaults are shown: " + "; ".join(problems) + ".",
            icon=":material/link_off:",
        )


def link_pending() -> bool:
    """Whether this run still reads a link (its first page has not run yet)."""
    return "_link_values" in st.session_state or bool(st.session_state.get("_link_problems"))
