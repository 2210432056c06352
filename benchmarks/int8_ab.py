"""A route measured and not taken (#18): int8 weights for the few-row products, against the FLOP limit.

    python -m benchmarks.int8_ab [--checkpoint distilled-en-pt] [--rounds 21]

Two copies of a checkpoint: one as the app runs it (the packed float16 weights, exact for every checkpoint made
here), one whose matrices multiplied on at most 32 rows (every decoding step, the encoder of a short sentence) go
through fbgemm's int8-weight kernel (``torch.fbgemm_linear_int8_weight_fp32_activation``: each matrix as integers
-127..127 times one scale, activations quantised to uint8 per call, int32 sums). Ours traced, text -> text, on the
bench's sentences (``anchors.groups``: 4 new ones a round), the two interleaved, one thread; each round's FLOP
limit from that round's 1024x1024 matmul, as in ``make bench``. Prints how many translations the int8 copy
changed, the medians, and the per-round ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from pathlib import Path

import torch

import core

from .anchors import WARMUP, groups, lengths, ours
from .limits import Shape, matmul_work, shape_flops

ROWS = 32  # at most this many rows take the int8 kernel (as the float16 one: core.fast.weights.ROWS_MAX)


def int8_copy(path: Path) -> core.Bundle:
    """The checkpoint with its few-row products on the int8-weight kernel (the rest as the app runs it)."""
    bundle = core.load(path, device="cpu")
    fast, packed = bundle.fast, {}
    bind = fast.bind

    def int8_bind(weight: torch.Tensor, bias: torch.Tensor | None, rows: int):  # noqa: ANN202 — core.fast.weights.Linear
        if rows > ROWS:
            return bind(weight, bias, rows)
        if id(weight) not in packed:
            w = weight.detach().float().contiguous()
            scale = float(w.abs().max()) / 127
            q = torch.round(w / scale).clamp(-127, 127).to(torch.int8)  # (out, in)
            pack = torch.fbgemm_pack_quantized_matrix(q)
            packed[id(weight)] = (q, pack, q.sum(1, dtype=torch.int32), scale, torch.zeros(weight.shape[0]))
        q, pack, column_sums, scale, zeros = packed[id(weight)]

        def run(x: torch.Tensor, _w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
            return torch.fbgemm_linear_int8_weight_fp32_activation(
                x.contiguous(), q, pack, column_sums, scale, 0, zeros if b is None else b
            )

        return run, weight, bias

    def int8_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        fn, w, b = int8_bind(weight, bias, x.numel() // max(x.shape[-1], 1))
        return fn(x if x.is_contiguous() else x.contiguous(), w, b)

    fast.bind, fast.linear = int8_bind, int8_linear  # type: ignore[method-assign]  # this copy only
    return bundle


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", default="distilled-en-pt")
    ap.add_argument("--rounds", type=int, default=21)
    args = ap.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="fbgemm_.* is deprecated", category=UserWarning)  # once, not per call
    path = Path(__file__).resolve().parents[1] / "checkpoints" / args.checkpoint
    exact, int8 = core.load(path, device="cpu"), int8_copy(path)
    sentence_groups = groups(args.rounds)
    texts = [t for g in sentence_groups for t in g]
    same = sum(ours(exact, False)(t) == ours(int8, False)(t) for t in texts)
    lens, shape = lengths(exact, sentence_groups), Shape.of_config(exact.config)
    matmul, matmul_flops = matmul_work()
    traced = {"float16": ours(exact, True), "int8": ours(int8, True)}
    times: dict[str, list[float]] = {"float16": [], "int8": [], "flop": []}
    for r, group in enumerate(sentence_groups):
        order = list(traced) if r % 2 == 0 else list(reversed(traced))
        for name in order:
            t0 = time.perf_counter()
            for text in group:
                traced[name](text)
            times[name].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        matmul()
        flops = sum(shape_flops(shape, lens.src[t], lens.steps[t])["total"] for t in group)
        times["flop"].append((time.perf_counter() - t0) * flops / matmul_flops)
    warm = slice(WARMUP, None)  # as in make bench: the first rounds warm up

    def med(values: list[float]) -> float:
        return statistics.median(values[warm])

    ratio = [b / a for a, b in zip(times["float16"], times["int8"], strict=True)]
    over = {k: [t / f for t, f in zip(times[k], times["flop"], strict=True)] for k in ("float16", "int8")}
    print(f"{args.checkpoint}: {same}/{len(texts)} translations unchanged by the int8 copy")
    print(
        f"traced, ms per round of {len(sentence_groups[0])}: float16 {med(times['float16']) * 1e3:.1f}, "
        f"int8 {med(times['int8']) * 1e3:.1f}, FLOP limit {med(times['flop']) * 1e3:.1f}"
    )
    print(
        f"int8 ÷ float16 {med(ratio):.2f} (median of {len(ratio) - WARMUP} rounds); ÷ FLOP limit: "
        f"float16 {med(over['float16']):.1f}×, int8 {med(over['int8']):.1f}×"
    )


if __name__ == "__main__":
    main()
