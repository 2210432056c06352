"""Once per server process: the thread count, the warm-up imports, the models loaded and shared by every session.

The model is loaded once per process (``st.cache_resource`` keyed on the checkpoint path) and never mutated: every
toggle travels as a frozen ``core.InferenceOptions``.
"""

from __future__ import annotations

import gc
import importlib
import os

import streamlit as st

import core


def threads() -> int:
    """Torch threads for the server (``LAB_TORCH_THREADS``, else 1 on <= 2 cores, else half the cores up to 4)."""
    env = os.environ.get("LAB_TORCH_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cpus = os.cpu_count() or 1
    return 1 if cpus <= 2 else min(4, cpus // 2)  # one sentence at a time: more threads mostly contend


# Modules the pages import on first use, measured (a fresh server, each page after the overview): Learn's first
# visit spent ~0.45 s importing (Streamlit's emoji table compiles one large regular expression when a success box
# first shows; pandas' Styler brings jinja2), the figure modules and Plotly's lazily loaded trace parts a little.
LAZY_MODULES = (
    "streamlit.emojis",
    "pandas.io.formats.style",
    "plotly.graph_objs._bar",
    "plotly.graph_objs.bar",
    "plotly.graph_objs.bar._marker",
    "plotly.graph_objs.scatter._textfont",
    "plotly.graph_objs.scatter._line",
    "plotly.graph_objs.heatmap._textfont",
    "plotly.graph_objs.layout.legend",  # the Model map page's legend and block outlines
    "plotly.graph_objs.layout.legend._font",
    "plotly.graph_objs.layout.shape",
    "plotly.graph_objs.layout.shape._line",
    "viz_app.figures.masking",
    "viz_app.figures.positional",
    *("viz_app.figures.relative_bias", "viz_app.positional.relative"),  # the Positional-encoding page's T5 tabs
    "viz_app.figures.decoding",
    "viz_app.figures.learn",
    "viz_app.figures.head_roles",
    "viz_app.figures.explain",
    *("viz_app.explain.importance", "viz_app.explain.rollout", "viz_app.explain.patching"),  # Why this word?'s tabs
    *("viz_app.explain.attribution", "viz_app.explain.analysis_store"),
    *("viz_app.explain.sources", "viz_app.figures.sources"),  # Source or prefix? (also the Steps page's share line)
    *("viz_app.learn.sections", "viz_app.learn.tables", "viz_app.learn.walkthrough"),  # the Learn page's parts
    *("viz_app.figures.model_map", "viz_app.figures.model_flow", "viz_app.figures.model_accounting"),  # Model map
    "core.anatomy",
    # the Corpus page (scan_summary brings the scan's fields: sacreBLEU, the word lists' reader) and its heads
    *("core.analysis.scan_summary", "core.analysis.corpus_sets", "viz_app.claims_corpus"),
    *("viz_app.corpus.store", "viz_app.corpus.table", "viz_app.figures.corpus", "viz_app.widgets.heads_over_set"),
    *("core.analysis.compare", "viz_app.claims_compare", "viz_app.compare.runs", "viz_app.compare.presets"),
    *("viz_app.explain.lens", "viz_app.figures.lens"),  # Why this word?'s logit lens
    *("viz_app.explain.zeroing", "core.analysis.value_zeroing"),  # and its value zeroing
    "viz_app.claims_explain",
    *("viz_app.steps", "viz_app.steps.draws", "viz_app.steps.sampling"),  # the Steps page's sampling
    *("viz_app.figures.sampling", "viz_app.claims_sampling"),
)


@st.cache_resource(show_spinner=False)
def warm_up() -> tuple[str, ...]:
    """Import ``LAZY_MODULES`` once per process, at the first script run (before ``load_bundle`` freezes what is
    alive), so that no page pays for them on its first visit. Returns those that could not be imported (a newer
    library that moved one): the pages import them again when they need them."""
    missing = []
    for name in LAZY_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return tuple(missing)


@st.cache_resource(show_spinner="Loading the model …", max_entries=4)
def load_bundle(path: str) -> core.Bundle:
    """The checkpoint at ``path``, loaded once per process and shared by every session (read only).

    Then every object alive (the libraries, the model) moves to the garbage collector's permanent generation:
    Streamlit runs a full collection after each script run, which otherwise walks them all every time (0.13 s
    for the ~256,000 objects of the app with one model loaded, measured here; microseconds after the freeze).
    Reference counting still frees them as usual; only cycles made before the freeze wait."""
    bundle = core.load(path)
    gc.collect()  # what is garbage now is freed, not frozen
    gc.freeze()
    return bundle
