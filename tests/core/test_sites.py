"""The site registry (``core.sites``): every recorded name has an entry that says how it joins, its axes and its
side; and no site name is typed anywhere else in core/ or viz_app/ (the registry's own patterns find them)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO, tiny_config

import core
from core import InferenceOptions, Recorder, Trace, Transformer
from core.decoding.search import greedy
from core.recording.call import Call
from core.sites import (
    ANALYSIS,
    ATTENTION_ARRAYS,
    ATTENTION_KINDS,
    GATE,
    HEADS,
    IDS,
    LAYER,
    MASK,
    MASK_PART,
    MASK_PARTS,
    OUTPUT_ARRAYS,
    OUTPUT_TOP_IDS,
    POSITION_BIAS,
    SCORES_RAW,
    SIDES,
    SITES,
    STACKS,
    STEP_ROWS,
    WEIGHTS,
    analysis_site,
    array_of,
    attention_array,
    attention_site,
    gate_site,
    heads_of,
    ids_site,
    is_batched,
    is_site,
    layer_name,
    mask_site,
    output_site,
    parse_attention_array,
    position_bias_site,
    site_axes,
    site_stack,
    spec_of,
)

SRC = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])  # the second sentence padded


# ---------------------------------------------------------------- the registry itself
def test_each_pattern_names_its_own_sites_and_no_other_entrys() -> None:
    for spec in SITES:
        assert spec.examples(), spec.pattern
        for name in spec.examples():
            assert spec_of(name) is spec, (name, spec.pattern)
    for name in ("output.bias", "encoder.0.self_attn", "cross.1.weights", "encoder.0.cross", "embed", "pe.src.x"):
        assert not is_site(name), name
    with pytest.raises(KeyError, match="'output.bias' is not a site name"):
        spec_of("output.bias")


def test_the_builders_name_what_the_registry_describes() -> None:
    assert spec_of(attention_array("cross", 1, "weights")) is WEIGHTS
    assert spec_of(array_of(attention_site("decoder", 0), "heads")) is HEADS
    assert parse_attention_array("decoder.1.cross.heads") == ("decoder.1.cross", "heads")
    with pytest.raises(ValueError, match="not an (array of an )?attention site"):
        parse_attention_array("decoder.1.out")
    assert heads_of("decoder.1.cross.heads") == "decoder.1.cross" and heads_of("embed.src") is None
    assert spec_of(gate_site(1)) is GATE and spec_of(layer_name("encoder", 3)) is LAYER
    assert spec_of(mask_site("cross")) is MASK and spec_of(mask_site("decoder", "causal")) is MASK_PART
    assert spec_of(position_bias_site("tgt")) is POSITION_BIAS and spec_of(ids_site("src")) is IDS
    assert spec_of(output_site("top_ids")) is OUTPUT_TOP_IDS
    assert spec_of(analysis_site("importance", "cross", "delta")) is ANALYSIS


def test_side_and_axes_come_from_the_name() -> None:
    """The decoder's sites (dropped and recorded again by a step that recomputes the prefix) and the axes the
    trace checks on load: T is the length of the side a name reads, Tq/Tk its attention kind's."""
    decoder = ["decoder.0.self.weights", "decoder.1.cross.k", "mask.cross", "mask.decoder.causal", "pe.tgt.bias"]
    decoder += ["ids.tgt", "keep.tgt", "embed.tgt", "decoder.1.out", "decoder.0.ssru.gate", "decoder.0"]
    encoder = ["encoder.1.self.q", "mask.encoder", "pe.src", "pe.src.bias", "ids.src", "embed.src", "encoder.0.out"]
    assert {site_stack(n) for n in decoder} == {"decoder"} and {site_stack(n) for n in encoder} == {"encoder"}
    assert site_stack("output.ids") is None and site_stack("analysis.patching.encoder") is None
    assert site_axes("decoder.1.cross.weights") == ("B", "H", "Tt", "Ts")
    assert site_axes("mask.cross.padding") == ("B", "Tt", "Ts")
    assert site_axes("pe.src.bias") == ("H", "Ts", "Ts") and site_axes("pe.tgt") == ("Tt", "D")
    assert site_axes("decoder.0.cross.k") == ("B", "H", "Ts", "dh") and site_axes("ids.tgt") == ("B", "Tt")
    assert site_axes("output.top_probs") == ("B", "Tt", "k")
    assert not is_batched("pe.src") and not is_batched("analysis.x") and is_batched("ids.src")


def _record(config_overrides: dict, options: InferenceOptions, **recorder: bool) -> Trace:
    torch.manual_seed(0)
    model = Transformer(tiny_config(**config_overrides)).eval()
    rec = Recorder(model, **recorder)
    with torch.no_grad():
        greedy(model, SRC, SRC != 0, call=Call(options=options, recorder=rec, max_len=6))
    return rec.freeze()


CALLS = {  # config, options: the ways a call records differently
    "cached": ({}, InferenceOptions()),
    "recomputed (causal mask off)": ({}, InferenceOptions(causal_mask=False)),
    "SSRU decoder": ({"decoder_self": "ssru"}, InferenceOptions()),
    "T5 relative bias": ({"positional": "relative", "norm": "pre"}, InferenceOptions()),
    "nothing masked": ({}, InferenceOptions(padding_mask=False, positional_encoding=False)),
}


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("everything", [False, True], ids=["weights", "qkv+activations"])
def test_every_recorded_name_has_an_entry_that_describes_its_array(call: str, everything: bool) -> None:
    overrides, options = CALLS[call]
    trace = _record(overrides, options, qkv=everything, activations=everything)
    sizes = {"B": 2, "Ts": SRC.shape[1], "Tt": trace.arrays["ids.tgt"].shape[1], "H": 2, "D": 16}
    for name, a in trace.arrays.items():
        spec = spec_of(name)
        assert spec.join not in ("none", "added"), name
        assert a.dtype == np.dtype(spec.dtype), (name, a.dtype)
        axes = site_axes(name)
        assert a.ndim == len(axes) and all(n == sizes.get(d, n) for d, n in zip(axes, a.shape, strict=True)), name
    if call == "cached":  # one query row per step: the keys a step had not seen yet hold each entry's fill
        causal = trace.mask("decoder", "causal")
        for name in ("decoder.0.self.weights", "decoder.0.self.scores", "mask.decoder"):
            assert (trace[name][..., ~causal] == spec_of(name).fill).all(), name
    if call.startswith("recomputed"):
        assert any(spec_of(n) is STEP_ROWS for n in trace.arrays)
    if call == "nothing masked":  # the raw scores share the masked scores' array: one array, not two copies
        shared = [n for n in trace.arrays if spec_of(n) is SCORES_RAW]
        assert shared and all(trace.arrays[n] is trace.arrays[n.removesuffix("_raw")] for n in shared)
    reloaded = Trace.load(trace.to_npz())  # the checks on load accept every array a real call records
    assert reloaded.keys() == trace.keys()


def test_a_beam_traced_translation_records_only_registered_names(tiny_checkpoint: Path) -> None:
    out = core.load(tiny_checkpoint, device="cpu").translate(
        "The cat sleeps.", beam_size=3, max_len=6, record=core.Record(qkv=True, activations=True)
    )
    assert all(is_site(name) and spec_of(name).join not in ("none", "added") for name in out.trace.arrays)
    Trace.load(out.trace.to_npz())


def test_an_array_of_the_wrong_axes_is_refused_on_load() -> None:
    trace = _record({}, InferenceOptions(), activations=True)
    arrays = {**trace.arrays, "decoder.0.out": np.zeros((2, 3, 7), dtype=np.float32)}
    with pytest.raises(ValueError, match=r"'decoder.0.out' has shape \(2, 3, 7\), not \(batch 2, target length"):
        Trace._from_parts(trace.metadata(), arrays)


# ---------------------------------------------------------------- no site name typed outside core/sites.py
SCANNED = ("core", "viz_app")
OWNER = Path("core/sites.py")
EXAMPLES = [name for spec in SITES for name in spec.examples()]


def _docstrings(tree: ast.AST) -> set[int]:
    holders = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, holders)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _strings(tree: ast.AST) -> Iterator[tuple[int, list[str | None]]]:
    """Each string constant and f-string outside docstrings: (line, its parts; None where a value is formatted in)."""
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
            parts = [v.value if isinstance(v, ast.Constant) else None for v in node.values]
            yield node.lineno, [p for p in parts if p != ""]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.lineno, [node.value]


# endings sites share with other vocabularies: a weight's '.bias' ('encoder_layers.0.ffn.linear1.bias'), a module's
# '.ssru' ('decoder_layers.0.ssru'), a corpus file's '.src' / '.tgt'. Alone, or after one formatted value, they are
# not taken for a site.
SHARED_ENDINGS = (".bias", ".ssru", ".src", ".tgt")
# what a formatted value in a site name stands for: a value a builder takes, or a name it builds ('{site}.weights')
VALUES = [*STACKS, *SIDES, *ATTENTION_KINDS, *MASK_PARTS, *ATTENTION_ARRAYS, *OUTPUT_ARRAYS, "0", "1", *EXAMPLES]
HOLE = "(?:" + "|".join(re.escape(v) for v in sorted(set(VALUES), key=len, reverse=True)) + ")"


def names_a_site(parts: list[str | None]) -> bool:
    """Whether a string (its literal parts; None: a formatted value) is a site name or a piece of one: with each
    value one that site names are built from, it is an example of some registry entry, whole or as its prefix
    ('decoder.') or suffix ('.weights'); or it reads as a site with 'x' for each value ('analysis.patching.{k}')."""
    literal = "".join(p for p in parts if p is not None)
    if not re.search(r"[a-z]", literal) or re.search(r"\s", literal) or literal in SHARED_ENDINGS:
        return False  # '{a}.{b}', prose (an error message that quotes a name), a weight's or a file's ending
    if is_site("".join("x" if p is None else p for p in parts)):
        return True
    pattern = "".join(HOLE if p is None else re.escape(p) for p in parts)
    for name in EXAMPLES:
        if re.fullmatch(pattern, name):
            return True
        if literal.endswith(".") and re.match(pattern, name):  # a prefix: name.startswith("decoder.")
            return True
        if literal.startswith(".") and re.search(f"{pattern}$", name):  # a suffix: name.endswith(".weights")
            return True
    return False


def site_literals() -> list[str]:
    found = []
    for package in SCANNED:
        for path in sorted((REPO / package).rglob("*.py")):
            relative = path.relative_to(REPO)
            if relative == OWNER:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), str(relative))
            found += [f"{relative}:{line}: {parts}" for line, parts in _strings(tree) if names_a_site(parts)]
    return found


def test_the_scan_recognises_site_names_and_leaves_other_dotted_names() -> None:
    for parts in (["embed.src"], [None, ".weights"], [None, ".", None, ".out"], ["analysis.importance.", None],
                  ["decoder."], [".heads"], ["encoder.0"], ["mask.", None]):  # fmt: skip
        assert names_a_site(parts), parts
    others = [["output.bias"], ["output.projection"], [None, ".self_attn"], [None, ".", None], ["."], [".weight"]]
    others += [[None, ".bias"], [".tgt"], [".", None, "f"], ["d", None], [None, ".ids"], ["no 'output.ids' here"]]
    for parts in [*others, ["model.encoder.embed_positions.weights"]]:
        assert not names_a_site(parts), parts


def test_no_site_name_is_typed_outside_the_registry() -> None:
    """Site names are built by ``core.sites``' functions (``attention_array``, ``ids_site`` ...), so that adding
    or renaming a site is one registry entry: a literal elsewhere would silently miss the change."""
    assert site_literals() == []


def test_parse_layer_names_the_layer_of_a_name_inside_one() -> None:
    from core.sites import embed_site, memory_site, parse_layer

    assert parse_layer(attention_array("cross", 1, "weights")) == ("decoder", 1)
    assert parse_layer(layer_name("encoder", 0)) == ("encoder", 0)
    assert parse_layer(embed_site("src")) is None and parse_layer(memory_site()) is None


def test_a_sub_layers_input_and_output_parse_as_attention_arrays() -> None:
    from core.sites import parse_attention_array

    assert parse_attention_array(attention_array("cross", 0, "x")) == (attention_site("cross", 0), "x")
    assert parse_attention_array(attention_array("encoder", 2, "out")) == (attention_site("encoder", 2), "out")
