"""Step-by-step decoding: the translation built one piece at a time, with what the model weighed."""

from __future__ import annotations

import time

import streamlit as st

from viz_app import common, figures, state

BEAMS = [1, 2, 4, 8]

st.title("Step-by-step decoding")
st.caption(
    "The decoder writes the translation one piece at a time. At each step it looks at the pieces it has "
    "written so far (masked self-attention) and at the source sentence (cross-attention), then scores "
    "every piece of its vocabulary; the best one is appended."
)

ss = st.session_state
if ss.pop("_stop_playing", False):
    ss["playing"] = False
if "_next_step" in ss:
    ss["step"] = ss.pop("_next_step")

state.clamp("beam", BEAMS)
out = common.sentence_bar()
st.radio(
    "Decoding",
    BEAMS,
    key="beam",
    horizontal=True,
    format_func=lambda b: "greedy (best piece each step)" if b == 1 else f"beam search, {b} beams",
)
if out is not None:
    common.translation_header(out)
    if out.beam_size > 1:
        st.caption(
            "Beam search kept several candidate translations alive and returned the best one; the steps "
            "below replay that winner, showing the model's probabilities along it."
        )
    n = len(out.steps)
    state.clamp("step", list(range(n)))

    def _move(delta: int) -> None:
        ss["step"] = min(n - 1, max(0, int(ss.get("step", 0)) + delta))

    c0, c1, c2, c3 = st.columns([6, 1, 1, 1.3], vertical_alignment="bottom")
    step = c0.select_slider(
        "Step", list(range(n)), key="step", format_func=lambda t: f"{t + 1}: {figures.token_text(out.steps[t].token)}"
    )
    c1.button("◀", on_click=_move, args=(-1,), help="previous step", width="stretch", key="prev")
    c2.button("▶", on_click=_move, args=(1,), help="next step", width="stretch", key="next")
    c3.toggle("Play", key="playing", help="Advance one step every second")

    s = out.steps[step]
    st.markdown(f"**Step {step + 1} of {n}.** Pieces written so far (decoder input):")
    common.token_pills(out.tgt_tokens[: step + 1], highlight=step)
    st.markdown(f"→ next piece: **`{figures.token_text(s.token)}`** with probability **{s.prob:.1%}**")

    note = state.options_note(out.options, out.beam_size)
    left, right = st.columns([1, 2])
    with left:
        title = figures.titled(f"Top {len(s.top_k)} candidates at step {step + 1}", note)
        fig = figures.topk_bars(s.top_k, s.token, title=title)
        common.chart(fig, f"topk_step{step + 1}", key="topk")
    with right:
        trace = out.trace
        if "decoder" in trace.kinds:
            rows = [s.attention("decoder", l) for l in range(trace.n_layers["decoder"])]
            fig = figures.step_attention(
                rows,
                out.tgt_tokens[: step + 1],
                title=figures.titled(
                    f"Decoder self-attention at step {step + 1}: every layer/head over the pieces so far", note
                ),
            )
            common.chart(fig, f"decoder_rows_step{step + 1}", key="dec_rows")
        else:
            st.info(
                "This decoder has no self-attention (it is an SSRU, a recurrent unit); see its forget gates "
                "on the overview page.",
                icon=":material/info:",
            )
        rows = [s.attention("cross", l) for l in range(trace.n_layers["cross"])]
        fig = figures.step_attention(
            rows,
            out.src_tokens,
            title=figures.titled(f"Cross-attention at step {step + 1}: every layer/head over the source", note),
        )
        common.chart(fig, f"cross_rows_step{step + 1}", key="cross_rows")

    if ss.get("playing"):
        if step < n - 1:
            time.sleep(1.0)
            ss["_next_step"] = step + 1
        else:
            ss["_stop_playing"] = True
        st.rerun()
