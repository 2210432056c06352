"""How the heads behave over a set of sentences (``core.analysis.head_spread``), as "What does each head do?" and
the Corpus page show it: each statistic's spread over the sentences, the cross heads' agreement with ALTI+, and
whether each label holds sentence by sentence."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.analysis.head_spread import HeadSpread, LabelStability
from viz_app import claims_corpus
from viz_app.figures import head_roles
from viz_app.session import params
from viz_app.widgets import export


def spread_maps(spread: HeadSpread, kind: str, stat: str) -> None:
    """Over the set: how much the statistic varies from sentence to sentence (the spread of each head's
    per-sentence means), and for cross-attention how closely each head follows ALTI+."""
    q = spread.quantiles(kind, stat)
    export.chart(
        head_roles.stat_heatmap(
            q[2] - q[0],
            title=f"{params.KINDS[kind].capitalize()}: {stat}, spread over the sentences (75th − 25th percentile)",
            value_name="spread",
        ),
        f"heads-{kind}-{stat}-spread",
        key=f"spread_{kind}",
    )
    if "alti" in spread.values.get(kind, {}):
        agreement = spread.quantiles(kind, "alti")[1]
        export.chart(
            head_roles.stat_heatmap(
                agreement,
                title=f"{params.KINDS[kind].capitalize()}: agreement with ALTI+ (median r over the sentences)",
                value_name="r",
                zmax=1.0,
            ),
            f"heads-{kind}-alti",
            key=f"alti_{kind}",
        )
        st.caption(
            "Agreement with ALTI+: per sentence, the correlation of the head's map with the source contributions "
            "ALTI+ finds for the same output words (rows rescaled to sum to 1); 1 = it attends where the "
            "contributions are, 0 = unrelated."
        )


def stability(stabilities: list[LabelStability], n_sentences: int, *, marked: bool = True) -> None:
    """Each label the set's averages give, and on how many sentences alone its rule holds."""
    st.subheader("Do the labels hold sentence by sentence?")
    st.markdown(claims_corpus.stability_note(stabilities, n_sentences, marked=marked))
    if stabilities:
        frame = pd.DataFrame(
            [
                {
                    "kind": params.KINDS[x.kind],
                    "layer": x.layer + 1,
                    "head": x.head + 1,
                    "label": x.label,
                    "holds on": x.share,
                    "sentences": f"{x.holds} of {x.defined}",
                }
                for x in stabilities
            ]
        ).sort_values("holds on")
        st.dataframe(
            frame,
            hide_index=True,
            height=240,
            column_config={
                "holds on": st.column_config.ProgressColumn("holds on", min_value=0.0, max_value=1.0, format="percent")
            },
            key="stability",
        )
