"""The Positional-encoding page's tabs for a model with a relative position bias (T5): the learned bias of each
stack against distance and its bucket map, and the bias this run added to each head's scores."""

from __future__ import annotations

import streamlit as st

import core
from core.anatomy.positions import relative_bias
from core.sites import Side, Stack, position_bias_site
from viz_app import claims
from viz_app.figures import relative_bias as figures
from viz_app.figures import style
from viz_app.positional import describe
from viz_app.session import server
from viz_app.widgets import export

# stack -> the side it reads (and its position_bias_site)
STACKS: dict[Stack, Side] = {"encoder": "src", "decoder": "tgt"}


def table_tab(path: str) -> None:
    """Each stack's bias per head against distance, how distances fall into buckets, and the bucket map."""
    model = server.load_bundle(path).model
    cfg = model.config
    span = st.slider(
        "Largest distance shown",
        8,
        4 * cfg.relative_max_distance,
        min(2 * cfg.relative_max_distance, 64),
        8,
        key="pe_span",
    )
    for stack in STACKS:
        bias = relative_bias(model, stack, span)
        if bias is None:
            continue
        st.markdown(f"##### The {stack}'s bias, per head")
        export.chart(
            figures.bias_curves(
                bias.distances,
                bias.values,
                title=f"{stack.capitalize()} self-attention: bias added to a score, by distance from query to key",
                exact=bias.exact,
                max_distance=bias.max_distance,
            ),
            f"relative_bias_{stack}",
            key=f"pe_bias_curves_{stack}",
        )
        st.caption(describe.buckets(bias))
    stack = st.radio("Bucket map of", list(STACKS), key="pe_bucket_stack", horizontal=True)
    bias = relative_bias(model, stack, span)
    if bias is not None:
        n = min(span, 64)
        export.chart(
            figures.bucket_map(
                bias.bucket_map(n), title=f"Which bucket each query reads for each key: {stack}, {n} positions"
            ),
            f"bucket_map_{stack}",
            key="pe_bucket_map",
        )
        st.caption(
            "Each cell's colour is the bucket, i.e. which of the learned numbers above that query adds for that key. "
            "Bands parallel to the diagonal: the bias depends only on the distance, not on where in the sentence "
            "the pair is."
        )


def run_tab(out: core.Translation, note: str) -> None:
    """The bias each head of each stack added to this run's scores (zeros when switched off), from the trace."""
    for stack, side in STACKS.items():
        site = position_bias_site(side)
        tokens = out.src_tokens if side == "src" else out.tgt_tokens
        if site not in out.trace:
            st.info(f"This trace holds no {stack} position bias (it was recorded before the lab kept it).")
            continue
        bias = out.trace[site]  # (H, Tq, Tk)
        if bias.shape[1:] != (len(tokens), len(tokens)):
            tokens = [str(i + 1) for i in range(bias.shape[-1])]
        export.chart(
            figures.bias_grid(
                bias,
                tokens[: bias.shape[1]],
                tokens[: bias.shape[2]],
                title=style.titled(f"Bias the {stack} added to each head's scores (query rows, key columns)", note),
                mask=out.trace.mask(stack),
            ),
            f"relative_bias_run_{stack}",
            key=f"pe_bias_{side}",
        )
        off = claims.bias_off(stack, bias)  # read from the trace: what was added, not what the sidebar says
        if off:
            st.info(off, icon=":material/info:")
    st.caption(
        "The same number is added to every layer's scores in a stack (the stack's table is shared), before the "
        "softmax. Cross-attention has no bias. Grey: keys the mask blocks (the decoder's later tokens), whose "
        "score becomes −∞ whatever the bias."
    )
