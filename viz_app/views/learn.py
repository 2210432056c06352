"""Learn: one attention sub-layer followed by hand with the model's real numbers — the input x, its projections
q = x·W_Q + b, k, v, the scores, the mask, the softmax, the weighted sum, then every head joined and projected by
W_O — each checked against what the model recorded. The steps are drawn by viz_app/learn/sections.py."""

from __future__ import annotations

import numpy as np
import streamlit as st

import core
from core.sites import attention_array, embed_site, position_bias_site
from viz_app.figures import style
from viz_app.learn import arithmetic, sections
from viz_app.learn.arithmetic import Arithmetic, scale_of_recorded
from viz_app.learn.walkthrough import Walkthrough, softmax_by_hand
from viz_app.session import checkpoints, errors, runs, selection, trace_replay, url
from viz_app.widgets import header, markup, pickers, sentence_bar

st.title("Learn: attention by hand")
st.caption(
    "Pick one query token and follow one attention sub-layer with the numbers this model really used: the "
    "token's input vector x, its query q = x·W_Q, the keys K and values V of one head, the scores, the mask, "
    "the softmax, the weighted sum of the values, and finally every head joined and projected by W_O. Each "
    "step is checked against what the model recorded."
)
model = None if trace_replay.replay() is not None else selection.bundle()
if model is not None:  # this model's own arithmetic (a replayed trace's is read from its numbers, step 4)
    st.latex(Arithmetic.of(model.config).attention())
    if note := arithmetic.header_note(Arithmetic.of(model.config)):
        st.caption(note)


def _focus(run: core.Translation, cfg: core.ModelConfig | None) -> sections.Focus:
    """The kind, layer, head and query picked on the page, and how this model scores (from ``cfg``, or for a
    replayed trace from its recorded numbers)."""
    trace = run.trace
    kind = pickers.kind_picker(trace.kinds)
    layer, head = pickers.layer_head_pickers(trace.n_layers[kind], trace.n_heads)
    q_tokens, k_tokens = style.query_key_tokens(kind, run.src_tokens, run.tgt_tokens)
    url.clamp("query", list(range(len(q_tokens))))
    i = st.select_slider(
        "Query token",
        list(range(len(q_tokens))),
        key="query",
        format_func=lambda t: f"{t + 1} {style.token_text(q_tokens[t])}" if 0 <= t < len(q_tokens) else str(t),
    )
    token = style.token_text(q_tokens[i])
    if kind != "encoder" and i < len(run.output_tokens):
        st.caption(
            f"Query {i + 1} is the decoder input “{markup.md(token)}”; from this position the model "
            f"predicted the next piece, “{markup.md(style.token_text(run.output_tokens[i]))}”."
        )
    labels = [f"{j + 1} {style.token_text(t)}" for j, t in enumerate(k_tokens)]
    biased = kind != "cross" and _bias_site(kind) in trace
    if cfg is not None:
        scaled: bool | None = cfg.attention_scale
    else:
        Q, K, _ = trace.qkv(kind, layer)
        bias = trace[_bias_site(kind)][head, i] if biased else 0.0
        raw = trace.scores(kind, layer, masked=False)[head, i]
        scaled = scale_of_recorded(K[head] @ Q[head, i], raw, bias, trace.mask(kind)[i], Q.shape[-1])
        if scaled is None:
            st.caption("The recorded scores match neither q·k nor q·k / √d_k; step 4 divides by √d_k.")
    return sections.Focus(run, kind, layer, head, i, token, list(k_tokens), labels, scaled is not False, biased)


def _bias_site(kind: str) -> str:
    """Where T5's relative position bias of attention ``kind`` is recorded (encoder: 'pe.src.bias')."""
    return position_bias_site("src" if kind == "encoder" else "tgt")


out = sentence_bar.sentence_bar()
if out is not None:
    header.translation_header(out)
run: core.Translation | None = out
bundle: core.Bundle | None = None
if out is not None and trace_replay.replay() is None:
    run = errors.guarded(
        lambda: runs.recorded_more(
            checkpoints.ckpt_path(),
            selection.sentence(),
            runs.options_key(selection.options()),
            int(st.session_state.get("beam", 1)),
        )
    )
    bundle = selection.bundle()
if run is not None and attention_array("encoder", 0, "q") not in run.trace:  # a saved trace from another page
    st.info(
        "This saved trace holds no queries, keys and values (only this page records them, to keep traces "
        "small); close it in the sidebar to recompute this page with the model.",
        icon=":material/history:",
    )
elif run is not None:
    focus = _focus(run, bundle.config if bundle is not None else None)
    kind, layer, head, i = focus.kind, focus.layer, focus.head, focus.query
    Q, K, V = run.trace.qkv(kind, layer)  # recorded for this page's runs: (H, Tq, dk), (H, Tk, dk) twice
    q, keys, values = Q[head, i].astype(np.float64), K[head].astype(np.float64), V[head].astype(np.float64)
    mask = run.trace.mask(kind)[i]
    recorded = run.trace.attention(kind, layer)[head, i]
    stream = embed_site("src")  # recorded: the walk-through carries the residual stream on by hand
    walk = Walkthrough(bundle, run.trace, kind, layer) if bundle is not None and stream in run.trace else None
    if walk is not None:
        sections.query_projection(walk, focus, sections.input_vector(walk, focus), q)
    else:
        sections.recorded_query(focus, q)
    bias = run.trace[_bias_site(kind)][head, i] if focus.biased else None  # (Tk,) what the model added
    hand = softmax_by_hand(q, keys, values, mask, scale=focus.scaled, bias=bias)
    sections.keys_and_values(focus, keys, values, walk)
    looked_up = walk.position_bias(head, i, len(keys)) if walk is not None and focus.biased else None
    sections.scores_and_softmax(focus, hand, mask, recorded, looked_up)
    sections.head_output(focus, hand, mask, recorded)
    if walk is not None:
        sections.heads_joined(walk, focus, hand.output)
