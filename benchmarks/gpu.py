"""Translation timings on a CUDA device beside the same machine's CPU: ``python -m benchmarks.gpu CKPT ... --out F``.

For each checkpoint and device: greedy translation of held-out English sentences one at a time, traced
(``Bundle.translate``, what the app calls) and untraced (core's KV-cached greedy with the packed weights), and
as one batch (core's greedy on one padded batch, untraced; ``Bundle.translate_batch``, traced). Interleaved rounds
(``benchmarks.timing.interleaved``), one set per device; every contender's outputs on the GPU are compared with its
outputs on the CPU.
Run where a GPU is present (the README's CUDA table comes from it); it prints a Markdown table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch

import core
from core.decoding.search import default_max_len, greedy, output_text
from core.recording.call import Call

from .anchors import ours
from .timing import interleaved


def sentences(n: int) -> list[str]:
    path = Path("data/ding-split/test.en")
    lines = (
        [l for l in path.read_text(encoding="utf-8").splitlines() if 6 <= len(l.split()) <= 25]
        if path.is_file()
        else []
    )
    if len(lines) < n:
        lines += [f"Sentence number {i} is here to be translated by the model." for i in range(n)]
    return lines[:n]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def contenders(bundle: core.Bundle, texts: list[str]) -> dict:
    model, tok, cfg, device = bundle.model, bundle.tokenizer, bundle.config, bundle.device
    fast = bundle.fast  # the packed weights the bundle made at load
    encoded = [bundle.encode_source(t)[0] for t in texts]  # eos appended, as the app encodes

    untraced_one, traced_one = ours(bundle, traced=False), ours(bundle, traced=True)  # text -> text, batch 1

    padded, keep = bundle.padded(encoded)  # (B, width) each

    def untraced_batch() -> list[str]:
        r = greedy(
            model,
            padded,
            keep,
            call=Call(options=core.InferenceOptions(), fast=fast, max_len=default_max_len(padded.shape[1]), top_k=1),
        )
        return [output_text(tok, r.tokens[i, 1 : 1 + r.lengths[i]].tolist(), cfg.eos_id) for i in range(len(texts))]

    def traced_batch() -> list[str]:
        return [one.text for one in bundle.translate_batch(texts, record=core.Record(qkv=False))]  # as before: no q/k/v

    def timed(fn):  # synchronise so a timing ends when the device is done
        def run():
            value = fn()
            sync(device)
            return value

        return run

    return {
        "batch 1 traced": timed(lambda: [traced_one(t) for t in texts]),
        "batch 1 untraced": timed(lambda: [untraced_one(t) for t in texts]),
        "batched traced": timed(traced_batch),
        "batched untraced": timed(untraced_batch),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoints", nargs="+")
    p.add_argument("--sentences", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default="gpu_bench.json")
    args = p.parse_args()
    texts = sentences(args.sentences)
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]  # the CPU first: the reference outputs
    result: dict = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "cpu_threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "sentences": len(texts),
        "rows": [],
    }
    print("| checkpoint | device | contender | median per sentence | rounds | same output as CPU | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for path in args.checkpoints:
        stats, outputs = {}, {}
        for device in devices:
            works = contenders(core.load(path, device=device), texts)
            outputs[device] = {name: work() for name, work in works.items()}  # also each contender's warm-up
            stats[device] = interleaved(works, rounds=args.rounds, warmup=0)
        for name in stats["cpu"]:
            for device in devices:
                st, got, ref = stats[device][name], outputs[device][name], outputs["cpu"][name]
                agree = sum(a == b for a, b in zip(got, ref, strict=True))
                speedup = stats["cpu"][name].median / st.median  # separate rounds per device: a ratio of medians
                print(
                    f"| {path} | {device} | {name} | {st.median * 1e3 / len(texts):.2f} ms | "
                    f"{min(st.samples) * 1e3:.0f}–{max(st.samples) * 1e3:.0f} ms / {len(texts)} | "
                    f"{agree}/{len(texts)} | {speedup:.2f}× |"
                )
                result["rows"].append(
                    {
                        "checkpoint": path,
                        "device": device,
                        "contender": name,
                        "ms_per_sentence": round(st.median * 1e3 / len(texts), 2),
                        "round_ms": [round(x * 1e3, 1) for x in st.samples],
                        "same_output_as_cpu": f"{agree}/{len(texts)}",
                        "speedup_vs_cpu": round(speedup, 2),
                    }
                )
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
