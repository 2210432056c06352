"""App state: cached model loaders and translations, the query-parameter state, defaults.

The model is loaded once per process (``st.cache_resource`` keyed on the checkpoint path) and
never mutated: every toggle travels as a frozen ``core.InferenceOptions``. Translations and analyses are
cached on (checkpoint, text, options, beam) in one cache bounded by bytes for all sessions (``viz_app/cache.py``,
``LAB_CACHE_MB``). Everything a link should restore lives in
``st.session_state`` under the keys of ``PARAMS`` and is mirrored into ``st.query_params``.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import streamlit as st
import torch

import core
from core.analysis import FUSIONS, HeadImportance, head_importance, head_importance_estimate
from core.analysis.alignment import AlignmentScores
from core.analysis.attribution import Attribution, attribute
from core.analysis.heads import STATS, HeadStatistics
from core.analysis.patching import PatchingResult, activation_patching
from core.analysis.survey import builtin_statistics, cached_builtin_statistics, gold_pairs, kept_alignment_scores
from core.call import Call
from core.segment import split_sentences
from viz_app.cache import cached, peek

REPO = Path(__file__).resolve().parents[1]
EXAMPLES: dict[str, list[str]] = {
    "en": [
        "Is there any tea left?",
        "The cat sleeps on the warm chair.",
        "I would like a cup of coffee, please.",
        "The old man who lives next door bought a new car yesterday.",
        "She did not know that the last train had already left the station.",
    ],
    "pt": [
        "Ainda há chá?",
        "O gato dorme na cadeira quente.",
        "Eu gostaria de um café, por favor.",
        "O velho que mora ao lado comprou um carro novo ontem.",
    ],
    "de": ["Ist noch Tee übrig?", "Die Katze schläft auf dem warmen Stuhl.", "Ich hätte gern eine Tasse Kaffee."],
}
KINDS = {"encoder": "encoder self-attention", "decoder": "decoder masked self-attention", "cross": "cross-attention"}
OptionsKey = tuple[Any, ...]  # ``options_key``: InferenceOptions' fields in order
OPTION_FIELDS = dataclasses.fields(core.InferenceOptions)


# ----------------------------------------------------------------------------- checkpoints
def checkpoint_root() -> Path:
    """$LAB_CHECKPOINT_ROOT (default 'checkpoints'); a relative path is tried in the cwd, then the repo."""
    root = Path(os.environ.get("LAB_CHECKPOINT_ROOT", "checkpoints")).expanduser()
    if not root.is_absolute() and not root.is_dir() and (REPO / root).is_dir():
        root = REPO / root
    return root


def checkpoint_names() -> list[str]:
    """Checkpoint folders (with a config.json) directly under the root."""
    return [p.name for p in core.list_checkpoints(checkpoint_root())]


def default_checkpoint() -> str | None:
    """$LAB_CHECKPOINT if it names a checkpoint under the root, else the folder in DEFAULT, else the first."""
    return core.default_checkpoint(checkpoint_root(), os.environ.get("LAB_CHECKPOINT", "").strip())


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
    "viz_app.figures.masking",
    "viz_app.figures.positional",
    "viz_app.figures.decoding",
    "viz_app.figures.learn",
    "viz_app.figures.head_roles",
    "viz_app.figures.explain",
    "viz_app.claims_explain",
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


def options_key(options: core.InferenceOptions) -> OptionsKey:
    """A small hashable key for the cache (never hash the model or the options object): the options' fields in
    their order, the ablated heads sorted."""
    return tuple(
        tuple(sorted(value)) if isinstance(value, frozenset) else value
        for value in (getattr(options, f.name) for f in OPTION_FIELDS)
    )


def _options(key: OptionsKey) -> core.InferenceOptions:
    return core.InferenceOptions(**{f.name: value for f, value in zip(OPTION_FIELDS, key, strict=True)})


def _analysis_options(key: OptionsKey) -> core.InferenceOptions:
    """The switches an analysis runs with: the translation's, over the whole vocabulary (the analyses score log p
    of the chosen words among every word; the shortlist only narrows what decoding may pick)."""
    return _options(key).with_changes(shortlist=False)


@cached("Translating …")
def translate(path: str, text: str, key: OptionsKey, beam: int, qkv: bool = False) -> core.Translation:
    """Cached ``Bundle.translate`` (long inputs truncated with a notice). q/k/v are recorded only when asked
    (the Learn page): they are most of a long trace's bytes and no other page reads them."""
    return load_bundle(path).translate(text, options=_options(key), beam_size=beam, truncate=True, record_qkv=qkv)


@cached("Re-running on the same output …")
def teacher_forced(path: str, text: str, target: str, key: OptionsKey) -> core.Translation:
    """Cached teacher-forced pass: same decoder inputs, other options (for like-for-like comparisons)."""
    return load_bundle(path).teacher_forced(text, target, options=_options(key), truncate=True, record_qkv=False)


@cached("Encoding …")
def encoder_output(path: str, text: str, key: OptionsKey) -> tuple[list[str], np.ndarray]:
    """The source pieces (eos included) and the encoder's output (Ts, D) for ``text`` with these switches: what
    the decoder reads (the Positional-encoding page compares it across word orders)."""
    bundle = load_bundle(path)
    ids, _ = bundle.encode_source(text, truncate=True)
    src, keep = bundle.padded([ids])
    with torch.inference_mode():
        memory = bundle.model.encode(src, keep, call=Call(options=_options(key)))  # (1, Ts, D)
    return [bundle.tokenizer.piece(i) for i in ids], memory[0].float().cpu().numpy()


@cached("Translating the batch …")
def translate_batch(path: str, texts: tuple[str, ...], key: OptionsKey) -> list[core.Translation]:
    """Cached padded batch (``Bundle.translate_batch``: one Translation per text, each its item of the batch's
    trace), without q/k/v (the Masks page reads weights and scores).

    Texts are cut to the characters the encoder reads (``truncate`` cuts them there too, and the page says so),
    since the batch's record of its texts refuses longer ones."""
    cut = [text[: core.bundle.MAX_CHARS] for text in texts]
    return load_bundle(path).translate_batch(cut, options=_options(key), truncate=True, record_qkv=False)


# Beyond this many pieces (source + translation) head importance opens with the one-pass estimate and measures
# each head switched off on request: the measurement costs a teacher-forced pass per head (on the default model,
# one thread, here: 1.1 s for 40 pieces, 5.7 s for 287; the estimate 0.08 s and 0.26 s).
IMPORTANCE_EXACT_PIECES = 64


def _ids(path: str, text: str, key: OptionsKey) -> tuple[list[int], list[int]]:
    """The source ids and greedy output ids (eos included) of the current translation."""
    out = translate(path, text, key, 1)
    return [int(i) for i in out.trace["ids.src"]], [int(i) for i in out.trace["output.ids"]]


@cached("Switching every head off, one at a time …")
def importance(path: str, text: str, key: OptionsKey) -> HeadImportance:
    """Cached head importance of the current (greedy) translation: each head switched off alone."""
    src_ids, out_ids = _ids(path, text, key)
    bundle = load_bundle(path)
    return head_importance(bundle.model, src_ids, out_ids, options=_analysis_options(key), fast=bundle.fast)


@cached("Estimating every head's effect from one gradient pass …")
def importance_estimate(path: str, text: str, key: OptionsKey) -> HeadImportance:
    """Cached first-order estimate of the same (one forward and backward pass)."""
    src_ids, out_ids = _ids(path, text, key)
    return head_importance_estimate(load_bundle(path).model, src_ids, out_ids, options=_analysis_options(key))


@cached("Patching every site from the clean run into the corrupted one …")
def patching(path: str, text: str, corrupt: str, key: OptionsKey, position: int | None) -> PatchingResult:
    """Cached activation patching of the current translation against a corrupted source sentence."""
    src_ids, out_ids = _ids(path, text, key)
    bundle = load_bundle(path)
    corrupt_ids, _ = bundle.encode_source(corrupt, truncate=True)
    return activation_patching(
        bundle.model,
        src_ids,
        corrupt_ids,
        out_ids,
        position=position,
        options=_analysis_options(key),
        fast=bundle.fast,
    )


@cached("Integrating gradients …")
def attribution(path: str, text: str, key: OptionsKey, position: int, steps: int = 32) -> Attribution:
    """Cached gradient x input and integrated gradients (``steps`` points) for output token ``position``."""
    src_ids, out_ids = _ids(path, text, key)
    bundle = load_bundle(path)
    return attribute(
        bundle.model,
        src_ids,
        out_ids,
        position,
        steps=steps,
        options=_analysis_options(key),
        fast=bundle.fast,
    )


@cached("Measuring every head on the built-in sentences (once per checkpoint; kept on disk) …")
def head_survey(path: str) -> tuple[HeadStatistics, str]:
    """Head statistics over the built-in sentences of the checkpoint's source language, and that language."""
    return builtin_statistics(load_bundle(path))


@cached("Scoring every cross-attention head on the hand-aligned sentences …")
def alignment(path: str) -> AlignmentScores | None:
    """Every cross head's AER on the shipped gold pairs of the checkpoint's languages (None: no gold data)."""
    bundle = load_bundle(path)
    gold = gold_pairs(*bundle.languages)
    return kept_alignment_scores(bundle, gold) if gold else None


def quality_line(bundle: core.Bundle) -> str:
    """One line on how good the checkpoint is: config.json's 'quality', else the card's first sentence."""
    quality = bundle.info.get("quality")
    if isinstance(quality, str) and quality.strip():
        return quality.strip()[:240]
    card = card_text()
    for para in card.split("\n\n"):
        para = " ".join(para.split())
        if para and not para.startswith(("#", "|", "-")):
            return (para.split(". ")[0].rstrip(".") + ".")[:240]
    return ""


def provenance(info: dict[str, Any]) -> str:
    """Where a checkpoint came from, from its config.json: imported (from which folder or package) or made here."""
    imported = info.get("imported_from")
    if isinstance(imported, dict):
        folder = Path(str(imported.get("folder", "?"))).name
        licence = imported.get("licence") or "not stated"
        return f"Imported from the Hugging Face Marian folder `{folder}` (licence: {licence})."
    origin = info.get("origin")
    if isinstance(origin, dict):
        return (
            f"Converted from `{origin.get('package', '?')}` ({origin.get('authors', '?')}; licence "
            f"{origin.get('licence', '?')})."
        )
    return "Made in this project (trained or distilled here; see its card)."


def card_text() -> str:
    """The selected checkpoint's card.md ('' when there is none or it cannot be read)."""
    name = selected()
    if name is None:
        return ""
    try:
        return (checkpoint_root() / name / "card.md").read_text(encoding="utf-8")[:200_000]
    except (OSError, UnicodeDecodeError):
        return ""


def export_stem(out: core.Translation) -> str:
    """'distilled-en-pt_the-cat-sleeps-on': a file name from the checkpoint and the sentence's first words."""
    model = str(out.trace.meta.get("model") or selected() or "trace")
    words = re.findall(r"\w+", out.source_text.lower())[:5]
    stem = "_".join(filter(None, [re.sub(r"[^\w.-]+", "-", model).strip("-"), "-".join(words)]))
    return stem[:80] or "trace"


def known_labels(path: str, kind: str) -> dict[tuple[int, int], list[str]]:
    """(layer, head) -> labels of ``kind``'s heads, from figures already computed (on disk or in the cache);
    empty until "What does each head do?" has measured this checkpoint. Never computes anything."""
    found = peek(head_survey, path)
    if found is None:
        if cached_builtin_statistics(load_bundle(path)) is None:
            return {}
        found = head_survey(path)  # on disk: read once into the shared cache, not at every rerun

    stats = found[0]
    scores = peek(alignment, path)
    if scores is not None:
        stats = stats.with_alignment(scores.head_aer)
    out: dict[tuple[int, int], list[str]] = {}
    for x in stats.labels():
        if x.kind == kind:
            out.setdefault((x.layer, x.head), []).append(x.label)
    return out


# ----------------------------------------------------------------------------- query-parameter state
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
BEAMS = (1, 2, 4, 8)  # the beam sizes the Steps page offers
_BOOL = dict(parse=_bool, dump=lambda v: "1" if v else "0")
_INDEX = dict(parse=_one_based, dump=lambda v: str(int(v) + 1))  # layers, heads, positions: 1-based in links
PARAMS: dict[str, Param] = {
    "ckpt": Param(""),
    "text": Param(""),
    "text2": Param(""),
    "pe": Param(True, **_BOOL),
    "pe_side": Param("both", choices=tuple(PE_SIDES)),
    "causal": Param(True, **_BOOL),
    "padding": Param(True, **_BOOL),
    "shortlist": Param(False, **_BOOL),
    "ablate": Param([], _ablate_parse, _ablate_dump),
    "beam": Param(1, int, choices=BEAMS),
    "kind": Param("cross", choices=tuple(KINDS)),
    "layer": Param(0, **_INDEX),
    "head": Param(0, **_INDEX),
    "agg": Param("single head", choices=("single head", "mean", "max")),
    "values": Param("weights", choices=("weights", "scores")),
    "fixed": Param(False, **_BOOL),
    "query": Param(0, **_INDEX),
    "step": Param(0, **_INDEX),
    "whatif": Param((), lambda t: tuple(int(i) for i in t.split(".")), lambda v: ".".join(map(str, v))),
    "compare": Param(False, **_BOOL),
    "explain_fusion": Param("mean", choices=FUSIONS),
    "explain_tab": Param(
        "Head importance", choices=("Head importance", "Attention rollout", "Patching", "Attribution")
    ),
    "overview_tab": Param("Encoder self-attention"),
    "heads_scope": Param("sentence", choices=("sentence", "set")),
    "heads_stat": Param("entropy", choices=tuple(STATS)),
    "overview_show": Param("run", choices=("run", "difference")),
    "sentence": Param(0, **_INDEX),
}


def head_label(kind: str, layer: int, head: int) -> str:
    """'cross L2 H3' for 0-based (layer 1, head 2)."""
    return f"{kind} L{layer + 1} H{head + 1}"


def parse_head_label(label: str) -> tuple[str, int, int]:
    """Inverse of ``head_label``: 'cross L2 H3' -> ('cross', 1, 2)."""
    kind, layer, head = label.split()
    return kind, int(layer[1:]) - 1, int(head[1:]) - 1


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
        if name in _INDEX_PARAMS and all(isinstance(c, int) for c in choices):
            allowed = f"{min(choices) + 1}–{max(choices) + 1}" if len(choices) > 1 else str(choices[0] + 1)
        else:
            allowed = ", ".join(map(str, choices[:8])) + (", …" if len(choices) > 8 else "")
        link_problem(name, f"is not available here (choices: {allowed})")
        st.session_state[name] = choices[0]


_INDEX_PARAMS = {name for name, p in PARAMS.items() if p.parse is _one_based}
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


def options() -> core.InferenceOptions:
    """The InferenceOptions chosen in the sidebar."""
    ss = st.session_state
    ablate = frozenset(parse_head_label(label) for label in ss.get("ablate", []))
    pe, side = bool(ss.get("pe", True)), ss.get("pe_side", "both")
    return core.InferenceOptions(
        positional_encoding=pe or side in ("encoder", "decoder"),
        encoder_pe=pe or side != "encoder",
        decoder_pe=pe or side != "decoder",
        causal_mask=bool(ss.get("causal", True)),
        padding_mask=bool(ss.get("padding", True)),
        ablate=ablate,
        shortlist=bool(ss.get("shortlist", False)),
    )


def options_note(opts: core.InferenceOptions, beam: int = 1) -> str:
    """Short label of the options in effect, for figure titles: 'as trained', 'PE off, 2 heads ablated, beam 4'."""
    note = opts.describe()
    if beam > 1:
        note = f"beam {beam}" if note == "as trained" else f"{note}, beam {beam}"
    return note


def selected() -> str | None:
    """The selected checkpoint's name if it is one of the listed checkpoints, else None.

    A widget value can be any string a client sends (Streamlit does not check it against the options), so
    every path the app opens goes through here: nothing outside the listed folders is ever opened, and no
    message repeats a path the user did not pick from the list."""
    name = st.session_state.get("ckpt")
    return name if isinstance(name, str) and name in checkpoint_names() else None


def bundle() -> core.Bundle | None:
    """The bundle of the selected checkpoint, or None after showing why it cannot be loaded."""
    if st.session_state.get("ckpt") and selected() is None:
        st.error(
            "**The chosen checkpoint is not one of the listed ones.** Pick one in the sidebar.",
            icon=":material/inventory_2:",
        )
        return None
    name = selected()
    if not name:
        return None
    return guarded(lambda: load_bundle(str(checkpoint_root() / name)))


def guarded(call: Callable[[], Any], refused: str = "Cannot translate this text.") -> Any:
    """Run ``call``; show a friendly message instead of a traceback and return None if it fails. ``refused``
    heads the message of an input the call refuses (what the input was for)."""
    try:
        return call()
    except core.InputError as exc:
        why = str(exc)
        st.warning(f"**{refused}** {why[:1].upper()}{why[1:]}", icon=":material/edit_note:")
    except core.CheckpointError as exc:
        st.error(f"**The checkpoint cannot be loaded.** {exc}", icon=":material/inventory_2:")
    except core.LabError as exc:
        st.error(f"**Something is wrong with the request.** {exc}", icon=":material/warning:")
    except Exception as exc:  # noqa: BLE001 — last resort: never show a bare traceback
        logging.getLogger("viz_app").exception("unexpected error while serving a page")  # details go to the server log
        st.error(
            f"**Unexpected error** ({type(exc).__name__}): {exc}. The details are in the server's log.",
            icon=":material/bug_report:",
        )
    return None


# ----------------------------------------------------------------------------- replaying a saved trace
REPLAY = "_replay"  # session state: the Translation of a trace file this session opened (never shared)


def replay() -> core.Translation | None:
    """The saved trace this session opened (every page then shows it, without the model), or None."""
    out = st.session_state.get(REPLAY)
    return out if isinstance(out, core.Translation) else None


REPLAYED = ("ids.tgt", "output.ids", "output.probs", "output.top_ids", "output.top_probs")  # a translation's


# the largest JSON trace opened for replay: reading JSON takes about eight times its size in memory (a 106 MB
# trace peaked at 0.8 GB more), so one upload may cost the server ~0.5 GB; the app's longest runs (256 pieces, with
# q/k/v) export ~100 MB of JSON but ~50 MB of .npz, which opens up to core.trace.MAX_ARCHIVE_BYTES unpacked
MAX_JSON_TRACE_BYTES = 64 << 20


def open_trace(data: bytes) -> str | None:
    """Open a trace file's bytes for replay; returns what is wrong with it (None when it opened). The pages read
    a whole translation: every attention kind of its model and the output, as ``Bundle.translate`` records.
    A JSON trace over MAX_JSON_TRACE_BYTES is refused before it is parsed."""
    if data[:2] != b"PK" and len(data) > MAX_JSON_TRACE_BYTES:
        return (
            f"This trace is too large to open as JSON: the file is {len(data) / 2**20:,.0f} MiB, and a JSON trace "
            f"is opened up to {MAX_JSON_TRACE_BYTES >> 20} MiB (reading JSON takes about eight times its size in "
            "memory). Export the run as NPZ instead: exact, smaller, and opened up to "
            f"{core.trace.MAX_ARCHIVE_BYTES >> 30} GiB unpacked."
        )
    try:
        trace = core.Trace.load(data)
    except ValueError as exc:
        return f"This file is not a trace the lab can open: {exc}"
    except Exception as exc:  # noqa: BLE001 — last resort, e.g. MemoryError: named, and the session goes on
        logging.getLogger("viz_app").exception("unexpected error while opening a trace file")
        return f"This file could not be opened ({type(exc).__name__}): {exc}"
    missing = [f"{kind} attention" for kind in trace.shape.kinds if kind not in trace.kinds]
    missing += [f"'{name}'" for name in REPLAYED if name not in trace]
    if missing:
        return (
            "This file is not a trace the lab can open: the pages replay a whole translation, and this one has "
            f"no {', no '.join(missing)}."
        )
    st.session_state[REPLAY] = core.Translation(trace)
    return None


def close_trace() -> None:
    st.session_state.pop(REPLAY, None)


def current(
    beam: int | None = None, opts: core.InferenceOptions | None = None, *, qkv: bool = False
) -> core.Translation | None:
    """The translation of the current sentence with the sidebar options (cached), or None after a message.

    While a saved trace is replayed: that trace, or None (with a note) when another run is asked for."""
    saved = replay()
    if saved is not None:
        if (opts is None or opts == saved.options) and (beam is None or beam == saved.beam_size):
            return saved
        st.info(
            "This comparison runs the model again with other switches; it is not available while a saved "
            "trace is replayed (close the trace in the sidebar to use the model).",
            icon=":material/history:",
        )
        return None
    name = selected()
    if not name or bundle() is None:
        return None
    text = sentence()
    beam = int(st.session_state.get("beam", 1)) if beam is None else beam
    key = options_key(opts or options())
    return guarded(lambda: translate(str(checkpoint_root() / name), text, key, beam, qkv))


MAX_SENTENCES = 40  # a pasted text is split into at most this many sentences (the rest is named in a notice)


def sentences() -> list[str]:
    """The text box's sentences (split as production translators do), at most MAX_SENTENCES."""
    return split_sentences(str(st.session_state.get("text", "")))[:MAX_SENTENCES] or [""]


def sentence() -> str:
    """The sentence the pages look inside: the text itself, or the picked one when the text has several."""
    found = sentences()
    index = st.session_state.get("sentence", 0)
    return found[index] if isinstance(index, int) and 0 <= index < len(found) else found[0]


def show_notices(out: core.Translation) -> None:
    """Truncation and unknown-piece notices, visibly."""
    for notice in out.notices:
        st.warning(notice, icon=":material/info:")


def ckpt_path() -> str:
    """Path (as str) of the selected checkpoint folder; InputError when it is not one of the listed ones."""
    name = selected()
    if name is None:
        raise core.InputError("The chosen checkpoint is not one of the listed ones. Pick one in the sidebar.")
    return str(checkpoint_root() / name)
