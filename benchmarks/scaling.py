"""Section 12 of ``make bench``: time and Trace size against source length and beam size, and
``benchmarks/scaling.png`` drawing them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

import core
from core.decoding.search import beam_search, greedy
from core.recording.call import Call

from . import contenders as C
from .timing import interleaved, paired_ratio

LENGTHS = (10, 25, 50, 100, 200, 500)
BEAMS = (1, 2, 4, 8)
BEAM_LENGTH = 20


def traced_beam(model: core.Transformer, src: torch.Tensor, beam: int, n: int) -> C.Work:
    """What the app does for a beam: beam search (untraced), then ONE teacher-forced pass over the best output
    with every head and q/k/v recorded (``Bundle.translate(beam_size=...)``); beam 1 is greedy, traced."""
    opts, keep, fast = core.InferenceOptions(), torch.ones_like(src, dtype=torch.bool), core.FastWeights(model)

    @torch.inference_mode()
    def run() -> core.Trace:
        rec = core.Recorder(model, qkv=True)
        if beam == 1:
            greedy(model, src, keep, call=Call(options=opts, recorder=rec, fast=fast, max_len=n))
            return rec.freeze()
        ids = beam_search(model, src, keep, call=Call(options=opts, fast=fast, max_len=n, beam_size=beam))
        tgt = torch.tensor([[C.BOS, *ids[:-1]]])  # (1, n) decoder inputs
        model(src, tgt, call=Call(options=opts, recorder=rec, fast=fast), src_keep=keep)
        return rec.freeze()

    return run


def mb(n_bytes: float) -> str:
    return f"{n_bytes / 1e6:.2f} MB" if n_bytes < 1e8 else f"{n_bytes / 1e6:.0f} MB"


def slope(xs: tuple[int, ...], ys: list[float]) -> float:
    """The exponent p of y ~ x^p between the last two points."""
    return math.log(ys[-1] / ys[-2]) / math.log(xs[-1] / xs[-2])


def plot(path: Path, lengths: dict[str, list[float]], beams: dict[str, list[float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.loglog(LENGTHS, lengths["traced"], "o-", label="time, traced (q/k/v too)")
    left.loglog(LENGTHS, lengths["untraced"], "s--", label="time, untraced")
    left.set_xlabel("source tokens (= generated tokens)")
    left.set_ylabel("seconds")
    twin = left.twinx()
    twin.loglog(LENGTHS, lengths["MB"], "^:", color="tab:red", label="Trace size (right axis)")
    twin.set_ylabel("Trace MB", color="tab:red")
    left.set_xticks(LENGTHS, [str(n) for n in LENGTHS], minor=False)  # after the twin: its loglog resets the ticks
    left.set_xticks([], minor=True)
    handles = left.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    left.legend(handles=handles, loc="upper left", fontsize=8)
    left.set_title("greedy: time and Trace size vs length", fontsize=10)
    right.plot(BEAMS, beams["time"], "o-", label="time")
    right.set_xlabel(f"beam size ({BEAM_LENGTH} → {BEAM_LENGTH} tokens)")
    right.set_ylabel("seconds")
    right.set_xticks(BEAMS)
    right.set_ylim(bottom=0)
    twin = right.twinx()
    twin.plot(BEAMS, beams["MB"], "^:", color="tab:red", label="Trace size (right axis)")
    twin.set_ylabel("Trace MB", color="tab:red")
    twin.set_ylim(0, max(beams["MB"]) * 1.3)
    handles = right.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    right.legend(handles=handles, loc="lower right", fontsize=8)
    right.set_title("beam search + the traced pass of its best output", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def scaling_section(rep: Any, rounds: int, png: Path) -> None:
    model = C.our_model()
    works: dict[str, C.Work] = {}
    for n in LENGTHS:
        src = C.source(n, seed=n)
        works[f"traced {n}"] = C.ours_greedy(model, src, True, n=n, qkv=True)
        works[f"untraced {n}"] = C.ours_greedy(model, src, False, n=n)
    for k in BEAMS:
        works[f"beam {k}"] = traced_beam(model, C.source(BEAM_LENGTH, seed=7), k, BEAM_LENGTH)
    size = {name: work().nbytes for name, work in works.items() if not name.startswith("untraced")}  # type: ignore[attr-defined]
    long = {k: w for k, w in works.items() if not k.startswith("beam")}  # ~3 s a round: fewer rounds
    st = interleaved(long, rounds=max(3, rounds // 3), warmup=1)
    st.update(interleaved({k: w for k, w in works.items() if k.startswith("beam")}, rounds=rounds, warmup=1))
    seconds = {name: s.median for name, s in st.items()}
    length_rows = [
        [
            str(n),
            st[f"traced {n}"].ms,
            st[f"untraced {n}"].ms,
            f"{paired_ratio(st[f'traced {n}'], st[f'untraced {n}']):.2f}×",
            mb(size[f"traced {n}"]),
        ]
        for n in LENGTHS
    ]
    beam_rows = [
        [f"beam {k}", st[f"beam {k}"].ms, f"{paired_ratio(st[f'beam {k}'], st['beam 1']):.2f}×", mb(size[f"beam {k}"])]
        for k in BEAMS
    ]
    traced = [seconds[f"traced {n}"] for n in LENGTHS]
    untraced = [seconds[f"untraced {n}"] for n in LENGTHS]
    nbytes = [size[f"traced {n}"] for n in LENGTHS]
    plot(
        png,
        {"traced": traced, "untraced": untraced, "MB": [b / 1e6 for b in nbytes]},
        {"time": [seconds[f"beam {k}"] for k in BEAMS], "MB": [size[f"beam {k}"] / 1e6 for k in BEAMS]},
    )
    S = C.SIZES
    rep.section(
        "12. Scaling: time and Trace size against source length and beam size",
        ["source tokens → generated", "traced (every head + q/k/v → Trace)", "untraced", "ratio", "Trace.nbytes"],
        length_rows
        + [["**beam size**", "**time (beam + traced pass)**", "–", "**÷ beam 1**", "**Trace.nbytes**"]]
        + [[r[0], r[1], "–", r[2], r[3]] for r in beam_rows],
        [
            f"Section 2's random-weight model ({S.layers}+{S.layers} layers, d_model {S.d_model}, {S.heads} heads, "
            f"vocabulary {S.vocab}, float16-valued weights, end-of-sentence suppressed): n source tokens → exactly n "
            "generated tokens, greedy; beams on 20 → 20 (their own rounds). Traced = what the app records (every "
            "head, q/k/v); a beam's Trace is the teacher-forced pass over its best output, so its size does not grow "
            "with the beam. "
            f"Drawn in `benchmarks/{png.name}`.",
            f"From {LENGTHS[-2]} to {LENGTHS[-1]} tokens time grows as n^{slope(LENGTHS, traced):.2f} traced, "
            f"n^{slope(LENGTHS, untraced):.2f} untraced, and the Trace as n^{slope(LENGTHS, nbytes):.2f} "
            "(every head's n × n maps).",
            "Caps: the model has sinusoidal positions (no limit), so 500 tokens run at the model level; the app's "
            "`Bundle` takes at most 255 source tokens (+ end of sentence, `max_source_tokens=256`) and 1024 "
            "output tokens, so the 500-token point is beyond what the app accepts (a learned-position model, or "
            "transformers' Marian with `max_position_embeddings=512`, would cap it at its table).",
        ],
    )
