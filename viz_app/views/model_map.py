"""Model map: the whole model for the current sentence — every block's tensor shape and parameter count, its
recorded values, the parameter accounting, the paper's table 3, and what decoding costs with and without the
key/value cache. The numbers come from ``core.anatomy``; the figures from ``viz_app.figures.model_map`` and
``model_accounting``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

import core
from core.anatomy import check_parameters, measure_steps, parameter_table, table_3, tensor_shapes, translation_cost
from core.sites import heads_of, ids_site, layer_name, output_site, site_stack
from viz_app.cache import cached
from viz_app.figures import model_accounting, model_flow, model_map, style
from viz_app.session import checkpoints, errors, runs, selection, server, trace_replay
from viz_app.widgets import export, header, sentence_bar

PAGE_FILES = {  # the page that explains a block
    "head": ("views/head_detail.py", "Head detail: this attention's heads"),
    "masks": ("views/masks.py", "Masks: what the causal mask blocks"),
    "positional": ("views/positional.py", "Positional encoding: the table added here"),
    "learn": ("views/learn.py", "Learn: one sub-layer by hand"),
    "explain": ("views/explain.py", "Why this word?"),
    "steps": ("views/steps.py", "Step-by-step decoding"),
}

st.title("Model map")
st.caption(
    "The whole model at once, for the sentence below: from the source pieces to the next word, every block with "
    "the shape of its tensor at this sentence's real sizes and the parameters it holds. Pick a block to see the "
    "values it really produced."
)


@cached("Recording every activation of this translation …")
def map_run(path: str, text: str, key: runs.OptionsKey, beam: int) -> core.Translation:
    """The page's translation with the residual stream and each head's output recorded (one teacher-forced
    pass on its own output, not decoded again)."""
    return server.load_bundle(path).record_more(runs.translate(path, text, key, beam))


def _tokens(site: str, out: core.Translation) -> list[str]:
    return out.src_tokens if site_stack(site) == "encoder" else out.tgt_tokens


def _values(node: model_flow.FlowNode, out: core.Translation) -> None:
    """The recorded values of one block, or why there are none."""
    trace, site = out.trace, node.site
    if site is None or site not in trace:
        st.info(
            "The recorder does not keep this block's own output (it keeps the stream after each layer, each head's "
            "output, the embeddings and the outputs); the boxes below and above it show what it reads and feeds.",
            icon=":material/visibility_off:",
        )
        return
    values = np.asarray(trace[site])
    tokens = _tokens(site, out)
    if site in (ids_site("src"), ids_site("tgt")):  # a column per position, counted from 1
        frame = pd.DataFrame({"piece": [style.token_text(t) for t in tokens], "id": values})
        st.dataframe(frame.set_axis(range(1, len(frame) + 1)).T)
        return
    if site == output_site("ids"):  # a column per step, counted from 1
        probs = np.asarray(trace[output_site("probs")])
        pieces = [style.token_text(t) for t in out.output_tokens]
        frame = pd.DataFrame({"piece": pieces, "id": values, "probability": probs.round(4)})
        st.dataframe(frame.set_axis(range(1, len(frame) + 1)).T)
        return
    # where it was recorded, counted as the pages count layers ('encoder layer 1'; the site's name in code, in the
    # table above, counts from 0)
    place = model_accounting.layer_name(site)
    where = "" if place == site else f" ({place})"
    if heads_of(site) is not None:  # (h, T, d_v) -> (T, h·d_v): the heads side by side, as W_O reads them
        values = values.transpose(1, 0, 2).reshape(values.shape[1], -1)
        what, columns = f"each head's output, concatenated{where}", "head·d_v (head 1 first)"
    elif site == output_site("top_probs"):
        what, columns = "the probabilities of the most likely pieces at each step", "rank"
    else:
        what, columns = f"{node.label}{where}", "dimension"
    scale = "Blues" if site == output_site("top_probs") else style.DIVERGING_SCALE
    fig = model_map.activation_figure(values, tokens, title=f"Recorded: {what}", columns=columns, scale=scale)
    export.chart(fig, f"map_{site}", key="map_values")


def _block_panel(node: model_flow.FlowNode, out: core.Translation) -> None:
    left, right = st.columns([3, 2])
    with left:
        st.markdown(f"#### {node.label} → `{node.shape_text}`")
        shapes = pd.DataFrame(
            {
                "tensor": [r.name for r in node.rows],
                "dims": ["(" + ", ".join(r.dims) + ")" for r in node.rows],
                "this sentence": [model_flow.shape_text(r.shape) for r in node.rows],
                "recorded as (site in code, from 0)": [r.site if r.recorded else "—" for r in node.rows],
            }
        )
        st.dataframe(shapes, hide_index=True, width="stretch")
    with right:
        st.metric("parameters this block adds", f"{node.parameters:,}")
        st.markdown(f"`{node.formula}`")
        if node.shared:
            st.caption(f"Shared: {node.shared}.")
        if node.page in PAGE_FILES:
            path, label = PAGE_FILES[node.page]
            st.page_link(path, label=f"Explained on {label} →", icon=":material/arrow_forward:")
    _values(node, out)


def _block_name(node: model_flow.FlowNode) -> str:
    """'encoder layer 1 · self-attention · 8 heads → 7×256': the block's layer counted from 1 (every layer's blocks
    have the same label)."""
    place = model_accounting.layer_name(node.key)
    where = node.column if place == node.key or node.label.startswith(place) else place
    return f"{where} · {node.label} → {node.shape_text}"


def _pick_from_chart(keys: list[str]) -> None:
    """A click on a box of the flow picks that block (the picker below follows)."""
    event = st.session_state.get("map_flow")
    points = event.get("selection", {}).get("points", []) if isinstance(event, dict) else []
    clicked = next((p.get("customdata") for p in points if p.get("customdata") in keys), None)
    if clicked and clicked != st.session_state.get("_map_clicked"):
        st.session_state["map_block"] = clicked
    st.session_state["_map_clicked"] = clicked


def _paper(current: core.anatomy.ParameterTable | None, name: str) -> None:
    st.subheader("The paper's table 3, counted the same way", divider="gray")
    counts = table_3()
    st.markdown(model_accounting.vocabulary_sentence())
    labels = [c.row.label for c in counts]
    picked = st.selectbox("Row of table 3", labels, key="map_paper_row")
    count = counts[labels.index(picked)]
    verdict = model_accounting.paper_verdict(count)
    if current is not None:
        left, right = st.columns([3, 2])
        left.dataframe(model_accounting.paper_beside(count, current, name), width="stretch")
        right.markdown(verdict)
    else:
        st.markdown(verdict)
    export.chart(model_accounting.paper_figure(counts), "paper_table_3", key="map_paper_chart")
    with st.expander("Every row of table 3"):
        st.dataframe(model_accounting.paper_frame(counts), hide_index=True, width="stretch")


def _cost(out: core.Translation, bundle: core.Bundle) -> None:
    st.subheader("Decoding: the key/value cache, step by step", divider="gray")
    dtype = next(bundle.model.parameters()).dtype
    cost = translation_cost(out, bundle.config, dtype=dtype)
    st.caption(f"What the decoder keeps between steps — {cost.keeps}.")
    run_key = (checkpoints.ckpt_path(), out.source_text, out.text, runs.options_key(out.options), out.beam_size)
    measured = st.session_state.get("_map_measured")
    measured = measured[1] if isinstance(measured, tuple) and measured[0] == run_key else None
    if st.button(
        "Measure each step on this machine, with and without the cache (takes a second or more)", key="map_measure"
    ):
        measured = errors.guarded(lambda: measure_steps(bundle.model, out), refused="Cannot time this translation.")
        if measured is not None:
            st.session_state["_map_measured"] = (run_key, measured)
    fig = model_accounting.cost_figure(cost, measured, title=f"Decoding “{out.text[:60]}” one step at a time")
    export.chart(fig, "decoding_cost", key="map_cost_chart")
    st.markdown(model_accounting.cache_sentence(cost))
    st.markdown(model_accounting.work_sentence(cost))
    if measured is not None:
        st.markdown(model_accounting.timing_sentence(measured))


def _replayed(out: core.Translation) -> None:
    """A saved trace holds the recorded arrays and the model's shape, not its weights or d_ff."""
    shape = out.trace.shape
    st.info(
        "A saved trace is replayed: the map needs the model itself for its parameter counts and feed-forward "
        f"sizes, which a trace does not hold. The trace knows the model's shape — {shape.n_encoder_layers} "
        f"encoder and {shape.n_decoder_layers} decoder layers, {shape.n_heads} heads, d_model {shape.d_model}, "
        f"{'an SSRU' if shape.decoder_self == 'ssru' else 'a self-attention'} decoder — and every array it "
        "recorded (below). Close the trace in the sidebar to see the whole map.",
        icon=":material/history:",
    )
    names = sorted(out.trace.keys()) if hasattr(out.trace, "keys") else []
    st.dataframe(
        pd.DataFrame({"recorded": names, "shape": [model_flow.shape_text(np.shape(out.trace[n])) for n in names]}),
        hide_index=True,
    )


out = sentence_bar.sentence_bar()
if out is not None:
    header.translation_header(out)
bundle = None if out is None or trace_replay.replay() is not None else selection.bundle()
if out is not None and bundle is None:
    _replayed(out)
    _paper(None, "")
elif out is not None and bundle is not None:
    full = errors.guarded(
        lambda: map_run(
            checkpoints.ckpt_path(),
            selection.sentence(),
            runs.options_key(selection.options()),
            int(st.session_state.get("beam", 1)),
        )
    )
    cfg = bundle.config
    table = parameter_table(cfg)
    check = check_parameters(table, bundle.model)
    if full is not None:
        shapes = tensor_shapes(full, cfg)
        c = st.columns(5)
        c[0].metric("parameters", f"{table.total:,}")
        c[1].metric("d_model · d_ff", f"{cfg.d_model} · {cfg.d_ff}")
        c[2].metric("layers (enc + dec)", f"{cfg.n_encoder_layers} + {cfg.n_decoder_layers}")
        c[3].metric("heads × d_k", f"{cfg.n_heads} × {cfg.d_head}")
        c[4].metric("vocabulary", f"{cfg.tgt_vocab_size:,}")
        st.caption(model_accounting.layout_sentence(table))
        n_layers = cfg.n_encoder_layers + cfg.n_decoder_layers
        every = st.radio(
            "Draw block by block",
            ["every layer", "the first layer of each stack"],
            index=0 if n_layers <= 4 else 1,
            horizontal=True,
            key="map_layers",
        )
        expanded = None if every == "every layer" else {layer_name("encoder", 0), layer_name("decoder", 0)}
        nodes = model_flow.flow_nodes(
            shapes, table, expanded=expanded, src_tokens=full.src_tokens, out_tokens=full.output_tokens
        )
        keys = [n.key for n in nodes]
        _pick_from_chart(keys)
        if st.session_state.get("map_block") not in keys:
            st.session_state["map_block"] = keys[3]  # the first attention (or the first layer) of the encoder
        by_key = {n.key: n for n in nodes}
        sizes = f"{len(full.src_tokens)} source pieces, {len(full.tgt_tokens)} decoder steps"
        title = f"{bundle.name} on this sentence: {sizes}"
        fig = model_map.flow_figure(nodes, title=title, selected=st.session_state["map_block"])
        export.chart(fig, "model_map", key="map_flow", on_select="rerun", selection_mode="points")
        st.caption(
            "Bold: each block's output shape for this sentence. Hover a box for every tensor inside it; click one "
            "(or pick it below) to see its values."
        )
        st.subheader("Look inside one block", divider="gray")
        picked = st.selectbox(
            "Block",
            keys,
            key="map_block",
            format_func=lambda k: _block_name(by_key[k]),
        )
        _block_panel(by_key[picked], full)

        st.subheader("Parameter accounting", divider="gray")
        st.markdown(model_accounting.total_sentence(table, check.numel))
        st.dataframe(model_accounting.layer_frame(table), hide_index=True, width="stretch")
        st.caption("Every block, with its formula and this model's numbers:")
        st.dataframe(model_accounting.block_frame(table), hide_index=True, width="stretch", height=420)
        _cost(full, bundle)
    _paper(table, bundle.name)
