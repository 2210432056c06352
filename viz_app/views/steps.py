"""Step-by-step decoding: the translation built one piece at a time, with what the model weighed; "what if the
model had picked another piece"; and, for beam search, the tree of every hypothesis it weighed."""

from __future__ import annotations

import html
import time
from collections.abc import Sequence

import streamlit as st

import core
from core.results import BeamTree
from core.sites import output_site
from viz_app import claims, claims_rules
from viz_app.cache import cached
from viz_app.explain import sources as explain_sources
from viz_app.figures import decoding, style
from viz_app.session import checkpoints, errors, params, runs, selection, server, trace_replay, url
from viz_app.steps import sampling
from viz_app.widgets import export, header, markup, scale, sentence_bar

BEAMS = list(params.BEAMS)

st.title("Step-by-step decoding")
_ssru = (
    b := selection.bundle() if trace_replay.replay() is None and checkpoints.selected() else None
) is not None and (b.config.decoder_self == "ssru")
st.caption(
    "The decoder writes the translation one piece at a time. At each step it looks at the pieces it has "
    "written so far ("
    + ("through its SSRU, a recurrent memory of them" if _ssru else "masked self-attention")
    + ") and at the source sentence (cross-attention), then scores every piece of its vocabulary; the best one "
    "is appended."
)


@cached("Decoding on from the piece you picked …")
def steps_what_if(path: str, text: str, key: runs.OptionsKey, prefix: tuple[int, ...]) -> core.Translation:
    """The translation forced to start with ``prefix`` and continued greedily (cached like any translation)."""
    return server.load_bundle(path).translate_from(
        text, list(prefix), options=runs.options_from_key(key), truncate=True, record=runs.NO_QKV
    )


@cached("Running beam search with its whole history …")
def steps_beam_tree(path: str, text: str, key: runs.OptionsKey, beam: int) -> BeamTree:
    """Every hypothesis beam search weighed for the current sentence (``Bundle.beam_tree``)."""
    return server.load_bundle(path).beam_tree(text, options=runs.options_from_key(key), beam_size=beam, truncate=True)


ss = st.session_state
if ss.pop("_stop_playing", False):
    ss["playing"] = False
if "_next_step" in ss:
    ss["step"] = ss.pop("_next_step")


def _ids(out: core.Translation) -> list[int]:
    chosen = output_site("ids")
    return [int(i) for i in out.trace[chosen]] if chosen in out.trace else []


def _pick_what_if(own: tuple[int, ...], step: int, candidates: tuple[int, ...]) -> None:
    """The "What if" selectbox changed: force the chosen candidate at ``step`` after the model's own pieces."""
    index = ss.get("whatif_pick")
    ss["whatif_pick"] = None
    if isinstance(index, int) and 0 <= index < len(candidates):
        ss["whatif"] = tuple(own[:step]) + (candidates[index],)


def _back() -> None:
    ss["whatif"] = ()
    ss["whatif_pick"] = None


def _valid_what_if(out: core.Translation, own: Sequence[int]) -> tuple[int, ...]:
    """The "what if" prefix in the state if it branches off this translation: the model's own pieces, then one of
    the other candidates the trace recorded at that step; else () — e.g. a link made for another sentence."""
    prefix = ss.get("whatif", ())
    if not isinstance(prefix, (tuple, list)) or not prefix or not all(isinstance(i, int) for i in prefix):
        return ()
    n = len(prefix)
    if n > len(own) or list(prefix[:-1]) != list(own[: n - 1]) or prefix[-1] == own[n - 1]:
        return ()
    if prefix[-1] not in {int(i) for i in out.trace[output_site("top_ids")][n - 1]}:
        return ()
    return tuple(prefix)


def _marked(original: str, alternative: str) -> str:
    return markup.marked_words(original, alternative)[1]  # the alternative, its changed words highlighted


def _what_if_header(out: core.Translation, alt: core.Translation, branch: int) -> None:
    forced = alt.steps[branch]
    own = out.steps[branch]
    c1, c2 = st.columns(2)
    c1.markdown(f"**The model's translation:** {markup.md(out.text) or '∅'}")
    c2.markdown(
        f"**What if step {branch + 1} were “{markup.md(style.token_text(forced.token))}”:** "
        f"{_marked(out.text, alt.text)}"
    )
    st.caption(
        f"At step {branch + 1} the model's own choice was “{style.token_text(own.token)}” "
        f"({style.share(own.prob)}); “{style.token_text(forced.token)}” had "
        f"{style.share(forced.prob)}. That piece is forced, then the model "
        f"continues greedily (its best piece at each step); {claims.what_if_marks(out.text, alt.text)}. The steps "
        "below walk through this alternative."
    )
    st.button("← Back to the model's own choice", on_click=_back, key="whatif_back", icon=":material/undo:")


def _what_if_picker(shown: core.Translation, own: tuple[int, ...], step: int, branch: int | None) -> None:
    """At the current step, "What if the model had picked …" among the top candidates the trace recorded."""
    if trace_replay.replay() is not None:
        st.caption("“What if …” runs the model again: close the saved trace in the sidebar to use it.")
        return
    if branch is not None and step > branch:
        st.caption(
            f"To branch again, go back to a step up to {branch + 1} or back to the model's own choice: after "
            "the forced piece this translation is the model's greedy continuation."
        )
        return
    top = shown.trace[output_site("top_ids")][step]
    own_piece = int(own[step]) if step < len(own) else -1
    candidates = tuple(int(i) for i in top if int(i) != own_piece)
    probs = {int(i): float(p) for i, p in zip(top, shown.trace[output_site("top_probs")][step], strict=True)}
    if not candidates:
        return
    mine = claims.own_choice(shown.trace, own, step)  # the model's own translation, not the forced alternative
    forced = shown.trace.piece(int(shown.trace[output_site("ids")][step])) if branch == step else None
    placeholder = claims.what_if_placeholder(
        None if mine is None else style.token_text(mine), None if forced is None else style.token_text(forced)
    )
    ss.setdefault("whatif_pick", None)
    if ss["whatif_pick"] is not None and not 0 <= ss["whatif_pick"] < len(candidates):
        ss["whatif_pick"] = None
    st.selectbox(  # the page's width: its placeholder names two pieces, whole at 1024 px too
        f"What if the model had picked another piece at step {step + 1}?",
        list(range(len(candidates))),
        index=None,
        key="whatif_pick",
        placeholder=placeholder,
        format_func=lambda j: (
            f"“{style.token_text(shown.trace.piece(candidates[j]))}” ({style.share(probs.get(candidates[j], 0.0))})"
        ),
        on_change=_pick_what_if,
        args=(own, step, candidates),
        help="Forces that piece at this step, then lets the model continue greedily, with new attention maps.",
    )


def _tree_clicked() -> None:
    """A dot of the beam tree was clicked: select that hypothesis in the pickers below the figure."""
    chart = ss.get("beam_tree_chart")
    points = getattr(getattr(chart, "selection", None), "points", None) or []
    for point in points:
        custom = point.get("customdata") if isinstance(point, dict) else None
        if isinstance(custom, (list, tuple)) and len(custom) == 2:
            ss["tree_step"], ss["tree_node"] = int(custom[0]), int(custom[1])
            return


def _beam_tree_section(out: core.Translation, fixed: bool) -> None:
    st.subheader("The beam search tree", divider="gray")
    if trace_replay.replay() is not None:
        st.info(
            "The tree is recorded by running beam search again, which needs the model: close the saved trace "
            "in the sidebar to see it.",
            icon=":material/history:",
        )
        return
    text = selection.sentence()  # the sentence the page shows (the picked one; a multilingual model's token first)
    tree = errors.guarded(
        lambda: steps_beam_tree(checkpoints.ckpt_path(), text, runs.options_key(out.options), out.beam_size)
    )
    if tree is None or not tree.steps:
        return
    keep, rank = claims.beam_rule(tree.beam_size, str(tree.meta.get("beam", "lab")), tree.alpha)
    st.caption(
        f"Each column is a step, each dot a hypothesis (the translation so far), placed by its rank. Its "
        f"**score** is the sum of the log-probabilities of its pieces (0 = certain; more negative = less likely). "
        f"{keep}; the next best are **pruned** (grey). The **red line** is the winning "
        f"translation, ranked by {rank}. Click a dot, or pick it below, to see its cross-attention."
    )
    rules = claims_rules.rules_of(tree.meta)
    said = claims_rules.rules_in_force_of(tree.meta)
    if said:
        st.caption(said + " They act on every hypothesis.")
    st.markdown(markup.md(decoding.beam_summary(tree)))
    if tree.divergence is not None:
        st.caption(f"Greedy translation: {markup.md(str(tree.meta.get('greedy_text', ''))) or '∅'}")
    n_steps = len(tree.steps)
    url.clamp("tree_step", list(range(n_steps)))
    t = int(ss["tree_step"])
    winner = tree.winner_path
    if ss.get("tree_node") not in range(len(tree.steps[t].candidate_ids)):
        ss["tree_node"] = winner[t] if t < len(winner) else 0  # start on the winner's hypothesis
    j = int(ss["tree_node"])
    note = selection.options_note(out.options, out.beam_size)
    fig = decoding.beam_tree(
        tree, title=style.titled(f"Beam search tree: {tree.beam_size} beams, {n_steps} steps", note), selected=(t, j)
    )
    export.chart(fig, "beam_tree", key="beam_tree_chart", on_select=_tree_clicked, selection_mode="points")
    c1, c2 = st.columns([1, 3])
    c1.selectbox("Step", list(range(n_steps)), key="tree_step", format_func=lambda i: f"Step {i + 1}")
    step = tree.steps[t]

    def label(k: int) -> str:
        if not isinstance(k, int) or not 0 <= k < len(step.candidate_ids):
            return str(k)
        status = decoding.node_status(tree, t, k)
        piece = style.token_text(tree.piece(int(step.candidate_ids[k])))
        star = " ★ winner's path" if winner[t : t + 1] == (k,) else ""
        return f"rank {k + 1} · “{piece}” · score {float(step.candidate_scores[k]):.3f} · {status}{star}"

    c2.selectbox("Hypothesis", list(range(len(step.candidate_ids))), key="tree_node", format_func=label)
    parent = int(step.candidate_parents[j])
    words = decoding.hypothesis_text(tree, step.path(j))
    piece = markup.md(style.token_text(tree.piece(int(step.candidate_ids[j]))))
    st.markdown(
        f"Hypothesis “{markup.md(words)}”: score {float(step.scores[parent]):.3f} so far "
        f"+ log p {float(step.candidate_logp[j]):.3f} for “{piece}” = **{float(step.candidate_scores[j]):.3f}**"
    )
    chosen = int(step.candidate_ids[j])
    for said in claims_rules.tree_notes(rules, t, claims_rules.step_limit(tree.meta), chosen):
        st.info(said, icon=":material/rule:")
    before = decoding.hypothesis_text(tree, step.tokens[parent]) if t else "the start"
    rows = [step.cross_attention[parent, layer] for layer in range(step.cross_attention.shape[1])]
    fig = decoding.step_attention(
        rows,
        list(tree.src_tokens),
        title=style.titled(
            f"Cross-attention at step {t + 1}, scoring the piece after “{html.escape(before)}”: every layer/head",
            note,
        ),
        fixed_scale=fixed,  # the colour-scale checkbox above the step's charts
    )
    export.chart(fig, f"beam_cross_step{t + 1}", key="beam_cross")


url.clamp("beam", BEAMS)
sampling.settle()
out = sentence_bar.sentence_bar(sampling=sampling.current())  # the whole text's line sampled as the page is
drawing = sampling.decoding_radio(on_change=_back)  # the sampling settings, or None
if out is not None and drawing is not None:
    out = sampling.sampled(out, drawing)  # the translation shown is the sampled one
drew = None if out is None else sampling.drawn_with(out)  # how its pieces were drawn, from its trace (None: taken)
if out is not None and not out.steps:
    st.info("This trace holds no decoding steps (it was not made by translating).", icon=":material/info:")
elif out is not None:
    own = tuple(_ids(out))
    prefix = _valid_what_if(out, own) if trace_replay.replay() is None and drawing is None else ()
    if ss.get("whatif") and not prefix:  # a choice made for another sentence, beam or model: start from the model's own
        url.link_problem("whatif", "is not a branch of this translation (its own pieces, then another candidate)")
        ss["whatif"] = ()
    alt = None
    if prefix:
        opts_key = runs.options_key(out.options)  # bound here: a lambda does not see that ``out`` is not None
        alt = errors.guarded(lambda: steps_what_if(checkpoints.ckpt_path(), selection.sentence(), opts_key, prefix))
    if prefix and alt is None:
        ss["whatif"] = ()  # it could not be decoded (the message above says why)
    branch = len(prefix) - 1 if alt is not None else None
    shown = alt if alt is not None else out
    if alt is not None and branch is not None:
        _what_if_header(out, alt, branch)
        header.rules_note(alt)
    else:
        header.translation_header(out)
        if drew is not None:
            sampling.settings_note(drew)
        if out.beam_size > 1:
            st.caption(
                "Beam search kept several candidate translations alive and returned the best one; the steps "
                "below replay that winner, showing the model's probabilities along it. The tree of every "
                "hypothesis is further down."
            )
    rows, of = shown.trace.meta.get("shortlist_rows"), shown.trace.meta.get("shortlist_of")
    if rows:  # read from the trace: a replayed one has no model to ask
        st.caption(
            f"Shortlist only: each step scored {rows} of the model's {of:,} "
            "words (its lexical shortlist for this sentence, as the production engine does); the probabilities "
            "below are shares of those words."
        )
    n = len(shown.steps)
    url.clamp("step", list(range(n)))

    def _move(delta: int) -> None:
        ss["step"] = min(n - 1, max(0, int(ss.get("step", 0)) + delta))

    def _step_label(t: int) -> str:
        mark = " (forced)" if branch is not None and t == branch else ""
        return f"{t + 1}: {style.token_text(shown.steps[t].token)}{mark}"

    c0, c1, c2, c3 = st.columns([5, 1, 1, 2], vertical_alignment="bottom")  # "Play" whole at 1024 px too
    step = c0.select_slider("Step", list(range(n)), key="step", format_func=_step_label)
    c1.button("◀", on_click=_move, args=(-1,), help="previous step", width="stretch", key="prev")
    c2.button("▶", on_click=_move, args=(1,), help="next step", width="stretch", key="next")
    c3.toggle("Play", key="playing", help="Advance one step every second")

    s = shown.steps[step]
    which = "" if alt is None else " of the alternative"
    st.markdown(f"**Step {step + 1} of {n}{which}.** Pieces written so far (decoder input):")
    markup.token_pills(shown.tgt_tokens[: step + 1], highlight=step)
    if branch is not None and step == branch:
        mine = claims.own_choice(out.trace, own, step) or s.top_k[0][0]
        st.markdown(
            f"→ next piece, **forced**: **`{style.token_text(s.token)}`** — the model gave it "
            f"**{style.share(s.prob)}**; its own choice was `{style.token_text(mine)}` "
            f"({style.share(dict(s.top_k).get(mine, 0.0))})"
        )
    else:
        how = "" if drew is None else ", **drawn**"
        st.markdown(f"→ next piece{how}: **`{style.token_text(s.token)}`** with probability **{s.prob:.1%}**")
    for said in claims_rules.step_notes(shown.trace, step, lambda i: style.token_text(shown.trace.piece(i))):
        st.info(said, icon=":material/rule:")  # what a generation rule of the model's folder did at this step
    explain_sources.step_share(shown, step, forced=alt is not None or drew is not None)
    if drew is None:
        _what_if_picker(shown, own, step, branch)
    else:
        sampling.draw_section(shown, step, drew)

    note = selection.options_note(shown.options, shown.beam_size)
    if branch is not None:
        note = f"{note}, what if"
    fixed = scale.fixed_scale()  # the attention rows' colours: 0–1, or stretched
    left, right = st.columns([1, 2])
    with left:
        what = f"Top {len(s.top_k)} " + ("candidates " if branch is None else "")  # the forced note is long
        title = style.titled(f"{what}at step {step + 1}", note)
        fig = decoding.topk_bars(s.top_k, s.token, title=title)
        export.chart(fig, f"topk_step{step + 1}", key="topk")
    with right:
        trace = shown.trace
        if "decoder" in trace.kinds:
            rows = [s.attention("decoder", l) for l in range(trace.n_layers["decoder"])]
            fig = decoding.step_attention(
                rows,
                shown.tgt_tokens[: step + 1],
                title=style.titled(
                    f"Decoder self-attention at step {step + 1}: every layer/head over the pieces so far", note
                ),
                fixed_scale=fixed,
            )
            export.chart(fig, f"decoder_rows_step{step + 1}", key="dec_rows")
            if step == 0:
                st.caption(
                    f"At step 1 the only piece written so far is `{shown.trace.start_piece}`, so every head gives it "
                    "all of its weight "
                    "(a softmax over one key); from step 2 on the heads have a choice."
                )
        else:
            st.info(
                "This decoder has no self-attention (it is an SSRU, a recurrent unit); see its forget gates "
                "on the overview page.",
                icon=":material/info:",
            )
        rows = [s.attention("cross", l) for l in range(trace.n_layers["cross"])]
        fig = decoding.step_attention(
            rows,
            shown.src_tokens,
            title=style.titled(f"Cross-attention at step {step + 1}: every layer/head over the source", note),
            fixed_scale=fixed,
        )
        export.chart(fig, f"cross_rows_step{step + 1}", key="cross_rows")

    if out.beam_size > 1 and alt is None:
        _beam_tree_section(out, fixed)

    if ss.get("playing"):
        if step < n - 1:
            time.sleep(1.0)
            ss["_next_step"] = step + 1
        else:
            ss["_stop_playing"] = True
        st.rerun()
