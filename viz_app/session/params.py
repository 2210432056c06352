"""Every session key, declared once: ``PARAMS``, the view state a link carries (its default and how it is
written into and read from the URL), and the attention kinds, PE sides, beams and head labels it uses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypedDict

from core.analysis import FUSIONS
from core.analysis.heads import STATS
from core.sites import ATTENTION_KINDS, AttentionKind

KINDS = {"encoder": "encoder self-attention", "decoder": "decoder masked self-attention", "cross": "cross-attention"}


@dataclass(frozen=True)
class Param:
    """One piece of view state: its default and how it is written into / read from the URL."""

    default: Any
    parse: Callable[[str], Any] = str
    dump: Callable[[Any], str] = str
    # a fixed set of values, checked whichever page reads it: a link to another page carries the value too, and
    # that page would drop a bad one without a word
    choices: tuple[Any, ...] = ()


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "on", "yes"):
        return True
    if text.lower() in ("0", "false", "off", "no"):
        return False
    raise ValueError(text)


def _one_based(text: str) -> int:
    value = int(text) - 1
    if value < 0:
        raise ValueError(text)
    return value


def _ablate_parse(text: str) -> list[str]:
    out = []
    for item in filter(None, text.split(",")):
        kind, layer, head = item.split(".")
        if kind not in KINDS:
            raise ValueError(item)
        out.append(head_label(kind, int(layer) - 1, int(head) - 1))
    return out


def _ablate_dump(labels: list[str]) -> str:
    return ",".join(f"{k}.{l + 1}.{h + 1}" for k, l, h in map(parse_head_label, labels))


PE_SIDES = {"both": "both sides", "encoder": "encoder only", "decoder": "decoder only"}
PE_B = {  # run B's positional encoding on the Compare page
    "same": "as run A",
    "on": "on",
    "off": "off",
    "off-encoder": "off on the encoder only",
    "off-decoder": "off on the decoder only",
}


SINGLE_HEAD = "single head"
HEAD_VIEWS = {SINGLE_HEAD: "one head", "mean": "mean of all heads", "max": "max over heads"}  # Head detail's choice
BEAMS = (1, 2, 4, 8)  # the beam sizes the Steps page offers


class _Codec(TypedDict):
    """How a ``Param`` is read from and written into a link, shared by several params (``Param(x, **codec)``)."""

    parse: Callable[[str], Any]
    dump: Callable[[Any], str]


_BOOL: _Codec = {"parse": _bool, "dump": lambda v: "1" if v else "0"}


_INDEX: _Codec = {"parse": _one_based, "dump": lambda v: str(int(v) + 1)}  # layers, heads, positions: 1-based in links


MAX_SEED = 2**53 - 1  # the sampling seed: what the browser's number box holds exactly


def _within(cast: Callable[[str], Any], low: float, high: float) -> Callable[[str], Any]:
    """A parser of a number from ``low`` to ``high`` (the sampling settings: the widgets' own bounds)."""

    def parse(text: str) -> Any:
        value = cast(text)
        if not low <= value <= high:  # NaN fails too
            raise ValueError(text)
        return value

    return parse


def _number(value: Any) -> str:
    return f"{value:g}"


PARAMS: dict[str, Param] = {
    "ckpt": Param(""),
    "text": Param(""),
    "text2": Param(""),
    "target_code": Param(""),  # a multilingual Marian model's target-language token, written before the sentence
    "pe": Param(True, **_BOOL),
    "pe_side": Param("both", choices=tuple(PE_SIDES)),
    "causal": Param(True, **_BOOL),
    "padding": Param(True, **_BOOL),
    "shortlist": Param(False, **_BOOL),
    "ablate": Param([], _ablate_parse, _ablate_dump),
    "beam": Param(1, int, choices=BEAMS),
    # sampling on the Steps page (viz_app/steps/sampling.py): a temperature (None: not sampling), top-k and top-p
    # (None: no cut) and the seed that replays the draw
    "temperature": Param(None, _within(float, 0.0, 2.0), _number),
    "top_k": Param(None, _within(int, 1, 10**6)),
    "top_p": Param(None, _within(float, 0.01, 1.0), _number),
    "seed": Param(0, _within(int, 0, MAX_SEED)),
    "kind": Param("cross", choices=tuple(KINDS)),
    "layer": Param(0, **_INDEX),
    "head": Param(0, **_INDEX),
    "agg": Param(SINGLE_HEAD, choices=tuple(HEAD_VIEWS)),
    "values": Param("weights", choices=("weights", "scores")),
    "present": Param(False, **_BOOL),  # the presentation setting (widgets/presentation.py)
    "fixed": Param(True, **_BOOL),  # attention weights on a fixed 0–1 colour scale (widgets/scale.py)
    "query": Param(0, **_INDEX),
    "step": Param(0, **_INDEX),
    "whatif": Param((), lambda t: tuple(int(i) for i in t.split(".")), lambda v: ".".join(map(str, v))),
    "compare": Param(False, **_BOOL),
    "explain_fusion": Param("mean", choices=FUSIONS),
    "explain_tab": Param(
        "Head importance",
        choices=(
            "Head importance",
            "Attention rollout",
            "Patching",
            "Attribution",
            "Source or prefix?",
            "Logit lens",
            "Value zeroing",
        ),
    ),
    "overview_tab": Param("Encoder self-attention"),
    "heads_scope": Param("sentence", choices=("sentence", "set")),
    "heads_stat": Param("entropy", choices=tuple(STATS)),
    "overview_show": Param("run", choices=("run", "difference")),
    "sentence": Param(0, **_INDEX),
    # the Compare page's run B (viz_app/compare/): its own checkpoint, sentence and switches; "" / "same" / None
    # mean "as run A" (a link leaves them out)
    "ckpt_b": Param(""),
    "text_b": Param(""),
    "pe_b": Param("same", choices=tuple(PE_B)),
    "causal_b": Param("same", choices=("same", "on", "off")),
    "ablate_b": Param(None, _ablate_parse, lambda v: _ablate_dump(v or [])),
    "forced_b": Param(True, **_BOOL),
}


def head_label(kind: str, layer: int, head: int) -> str:
    """'cross L2 H3' for 0-based (layer 1, head 2)."""
    return f"{kind} L{layer + 1} H{head + 1}"


def parse_head_label(label: str) -> tuple[AttentionKind, int, int]:
    """Inverse of ``head_label``: 'cross L2 H3' -> ('cross', 1, 2)."""
    kind, layer, head = label.split()
    if kind not in ATTENTION_KINDS:
        raise ValueError(label)
    return kind, int(layer[1:]) - 1, int(head[1:]) - 1


INDEX_PARAMS = {name for name, p in PARAMS.items() if p.parse is _one_based}  # 1-based in links, 0-based here

# Every other session key, declared here once with the module that owns it: widget keys (Streamlit keeps a widget's
# value under its key) and the app's own bookkeeping ('_' first). A link does not carry them. '{kind}' and the like
# stand for a part filled in at run time. tests/viz_app/test_session_keys.py fails on a key used but not declared.
SESSION_KEYS: dict[str, str] = {
    **dict.fromkeys(("_initialised", "_link_values", "_link_problems", "_first_page"), "session/url.py, app.py"),
    "_replay": "session/trace_replay.py",
    **dict.fromkeys(("_text_defaulted", "_trace_error", "trace_file", "close_trace", "reset"), "widgets/sidebar.py"),
    **dict.fromkeys(
        ("_matrix_version", "matrix_{kind}_{version}", "clear_{kind}", "invert_{kind}"), "widgets/ablation.py"
    ),
    "example": "widgets/sentence_bar.py",
    "share_{measure}_{other}": "widgets/share_links.py",
    "before_after_logp": "widgets/header.py",
    **dict.fromkeys(("dl_json", "dl_npz"), "widgets/export.py"),
    **dict.fromkeys(("overview_head", "grid_{kind}", "causal_rows_{kind}", "ssru_{layer}"), "views/overview.py"),
    "head_detail": "views/head_detail.py",
    **dict.fromkeys(
        (
            "map_layers",
            "map_block",
            "map_flow",
            "_map_clicked",
            "map_values",
            "map_paper_row",
            "map_paper_chart",
            "map_cost_chart",
            "map_measure",
            "_map_measured",
        ),
        "views/model_map.py",
    ),
    **dict.fromkeys(("mask_kind", "mask_item", "mask_panels", "mask_stages", "masks_{name}"), "views/masks.py"),
    **dict.fromkeys(
        (
            "pe_tab",
            "pe_n",
            "pe_dims",
            "pe_table",
            "pe_curves",
            "pe_similarity",
            "pe_added_{side}",
            "pe_cmp_tab",
            "pe_cmp_show_{kind}",
            "cmp_{kind}",
            "pe_table_side",
        ),
        "views/positional.py",
    ),
    **dict.fromkeys(
        ("pe_span", "pe_bias_curves_{stack}", "pe_bucket_stack", "pe_bucket_map", "pe_bias_{side}"),
        "positional/relative.py",
    ),
    **dict.fromkeys(
        (
            "_next_step",
            "_stop_playing",
            "playing",
            "prev",
            "next",
            "topk",
            "cross_rows",
            "dec_rows",
            "beam_tree_chart",
            "beam_cross",
            "tree_step",
            "tree_node",
            "whatif_pick",
            "whatif_back",
        ),
        "views/steps.py",
    ),
    **dict.fromkeys(("decoding", "sampling_chart"), "steps/sampling.py"),
    **dict.fromkeys(
        (
            "_analysis",
            "_explain_replay_tab",
            "explain_word",
            "explain_head",
            "explain_how",
            "explain_open",
            "explain_k",
            "explain_k_translate",
            "explain_without",
            "explain_replacement",
            "explain_exact",
            "explain_exact_for",
            "explain_corrupt",
            "explain_patch_position",
            "explain_attr_position",
            "explain_ig_steps",
            "explain_ig_more",
            "explain_contrast",
            "explain_contrast_typed",
            "explain_contrast_kind",
            "explain_src_typed",
            "explain_src_ig_word",
            "explain_src_ig",
            "explain_source_share",
            "explain_source_maps",
            "explain_src_norms",
            "explain_value_norms",
            "importance_{kind}",
            "rollout",
            "patching_encoder",
            "patching_decoder",
            "patching_cross",
            "attribution",
            "attribution_prefix",
            "attribution_contrast",
            "attribution_contrast_prefix",
            "explain_lens",
            "zeroing_kind",
            "zeroing_layer",
            "zeroing_source",
            "zeroing_alti",
            "zeroing_layer_map",
            "zeroing_attention_map",
        ),
        "views/explain.py, explain/",
    ),
    **dict.fromkeys(
        (
            "stat_{kind}",
            "aer_map",
            "align_by",
            "align_method",
            "align_shift",
            "align_links",
            "align_matrix",
        ),
        "views/heads.py",
    ),
    "learn_stages": "learn/sections.py",
    **dict.fromkeys(
        (
            "_corpus_running",
            "corpus_source",
            "corpus_set",
            "corpus_file",
            "corpus_threshold",
            "corpus_scan",
            "corpus_cancel",
            "corpus_show",
            "corpus_contains",
            "corpus_table",
            "corpus_open_{page}",
            "corpus_scatter",
            "corpus_hist_{field}",
            "corpus_dl_{ext}",
            "corpus_heads",
            "corpus_heads_stat",
        ),
        "views/corpus.py",
    ),
    **dict.fromkeys(("spread_{kind}", "alti_{kind}", "stability"), "widgets/heads_over_set.py"),
    **dict.fromkeys(
        (
            "cmp_preset",
            "cmp_map_{kind}",
            "cmp_table",
            "cmp_head",
            "cmp_a",
            "cmp_b",
            "cmp_diff",
            "cmp_dl_{run}",
            "cmp_dl_table",
            "cmp_share_{run}",
            "cmp_attr_{run}",
        ),
        "views/compare.py, compare/",
    ),
    **dict.fromkeys(
        ("hf_folder", "hf_name", "hf_import", "_import_selected", "_import_result"), "widgets/open_folder.py"
    ),
}
