"""The lab on a model of NLLB-200-distilled-600M's shape (issue #33 item 7), random weights:

    python -m benchmarks.nllb_size [--folder downloads/nllb-600m-shape] [--skip-browser]

1. ``python -m core import-hf`` of the folder (``benchmarks.nllb_folder`` builds it): wall time and the process's
   peak resident memory (``/usr/bin/time``'s maximum RSS, i.e. the kernel's VmHWM), against the weights' bytes.
2. One traced translation of a 20-word sentence, every head recorded (``core.load`` + ``Bundle.translate``),
   against transformers' ``generate(output_attentions=True, return_dict_in_generate=True)`` on the same folder;
   both in float32 on 2 torch threads, each forced to take exactly ``STEPS`` decoder steps (transformers:
   ``min_new_tokens = max_new_tokens``; the lab: ``max_len`` with the lab's greedy tokens checked to be as many and
   equal to transformers'); interleaved rounds, the first of each dropped, medians.
3. The app's first render on it: a fresh server on a checkpoint root holding only this model, Chromium opening the
   page until every heatmap of the default translation is drawn.

Prints a Markdown table; the load average is printed beside it (the machine is shared).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from . import nllb_folder

REPO = Path(__file__).resolve().parents[1]
# 20 words
SENTENCE = "The waiter brought us two glasses of cold water and a small plate of bread without being asked by anyone."
STEPS = 20  # decoder steps (forward passes) each side takes: the forced language code and 19 more tokens
THREADS = 2


def load_average() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


# ----------------------------------------------------------------------------- 1. import
def measure_import(folder: Path, out: Path) -> dict[str, float]:
    """Run import-hf in a fresh process under /usr/bin/time -v: seconds and peak RSS (bytes)."""
    command = ["/usr/bin/time", "-v", sys.executable, "-m", "core", "import-hf", str(folder), "--out", str(out)]
    command += ["--force"] if out.exists() else []
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"nllb_size: import-hf failed:\n{done.stderr[-3000:]}")
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    return {"seconds": seconds, "peak_bytes": peak_kb * 1024.0, "weights_bytes": float(weights_bytes(folder))}


def weights_bytes(folder: Path) -> int:
    return (folder / "model.safetensors").stat().st_size


# ----------------------------------------------------------------------------- 2. one traced translation
def transformers_run(folder: Path) -> tuple[Callable[[], list[int]], str]:
    """A function running transformers' generate with every attention returned (eager attention); its version."""
    import transformers
    from transformers import AutoTokenizer, M2M100ForConditionalGeneration

    tokenizer = AutoTokenizer.from_pretrained(str(folder), src_lang=nllb_folder.SOURCE)
    model = M2M100ForConditionalGeneration.from_pretrained(str(folder), attn_implementation="eager").eval()
    inputs = tokenizer([SENTENCE], return_tensors="pt")
    forced = tokenizer.convert_tokens_to_ids(nllb_folder.TARGET)

    def run() -> list[int]:
        with torch.inference_mode():
            out = model.generate(
                **inputs,
                forced_bos_token_id=forced,
                num_beams=1,
                do_sample=False,
                min_new_tokens=STEPS,
                max_new_tokens=STEPS,
                output_attentions=True,
                return_dict_in_generate=True,
            )
        assert len(out.cross_attentions) == STEPS  # every step's heads came back
        return [int(i) for i in out.sequences[0, 1:]]  # without the decoder's start token

    return run, transformers.__version__


def lab_run(checkpoint: Path) -> Callable[[], list[int]]:
    """A function running the lab's traced greedy translation (every head, queries/keys/values too)."""
    import core

    bundle = core.load(checkpoint, device="cpu")

    def run() -> list[int]:
        out = bundle.translate(SENTENCE, max_len=STEPS)
        return [int(i) for i in out.trace["output.ids"]]

    return run


def interleaved(runs: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[float]]:
    """Seconds per round for each run, taken in turn; the first round (warm-up) dropped."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(rounds + 1):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            if r:
                times[name].append(time.perf_counter() - start)
    return times


def median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}–{max(values):.2f}, n={len(values)})"


def lab_float16_run(checkpoint: Path) -> Callable[[], list[int]]:
    """The same, with every weight rounded to float16 (what ``import-hf --dtype float16`` stores): the fast path then
    reads the matrices at half the bytes (fbgemm's float16-weight kernel, float32 sums)."""
    import core
    from core.storage.checkpoint import load_checkpoint

    model, tokenizer, info = load_checkpoint(checkpoint, "cpu")
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(param.half().float())
    bundle = core.Bundle(model, tokenizer, info)

    def run() -> list[int]:
        out = bundle.translate(SENTENCE, max_len=STEPS)
        return [int(i) for i in out.trace["output.ids"]]

    return run


def floor_run(checkpoint: Path, half: bool) -> Callable[[], None]:
    """What any engine must do per traced translation at the least: ``STEPS`` times, one row through every matrix a
    decoding step reads (each decoder layer's self-attention, cross-attention query and output, FFN; the output
    layer; the cross-attention keys and values are made once per sentence, so left out) and nothing else: the
    memory-streaming floor, in float32 (``F.linear`` on torch's threads), or with float16 weights through the fast
    path's kernel (``core.fast.weights``, as the lab runs a float16 checkpoint)."""
    import torch.nn.functional as F

    from core.fast.weights import FastWeights
    from core.storage.checkpoint import load_checkpoint

    model = load_checkpoint(checkpoint, "cpu")[0]
    skip = ("cross_attn.k_proj", "cross_attn.v_proj")
    mats = [
        m.weight
        for layer in model.decoder_layers
        for name, m in layer.named_modules()
        if isinstance(m, torch.nn.Linear) and name not in skip
    ] + [model.output.weight]
    if half:
        with torch.no_grad():
            for w in mats:
                w.copy_(w.half().float())
    linear = FastWeights(model).linear if half else F.linear

    def run() -> None:
        with torch.inference_mode():
            for _ in range(STEPS):
                for w in mats:
                    linear(torch.ones(1, w.shape[1]), w)

    return run


def measure_translation(folder: Path, checkpoint: Path, rounds: int) -> dict[str, Any]:
    """Seconds per traced translation: the lab (float32, and float16-rounded weights) and transformers' generate."""
    torch.set_num_threads(THREADS)  # this benchmark's process only
    start = time.perf_counter()
    lab = lab_run(checkpoint)
    load_seconds = time.perf_counter() - start
    hf, version = transformers_run(folder)
    lab_ids, hf_ids = lab(), hf()
    if len(lab_ids) != STEPS or len(hf_ids) != STEPS:
        raise SystemExit(f"nllb_size: {len(lab_ids)} and {len(hf_ids)} tokens, not {STEPS} each")
    times = interleaved({"lab": lab, "transformers": hf}, rounds)
    del lab  # one float32 model at a time beside transformers'
    floor = floor_run(checkpoint, half=False)
    times["floor, float32"] = interleaved({"floor": floor}, rounds)["floor"]
    del floor
    half = lab_float16_run(checkpoint)
    half_ids = half()
    times["lab, float16 weights"] = interleaved({"half": half, "transformers": hf}, rounds)["half"]
    del half
    times["floor, float16 weights"] = interleaved({"floor": floor_run(checkpoint, half=True)}, rounds)["floor"]
    return {
        "times": times,
        "load_seconds": load_seconds,
        "same_tokens": lab_ids == hf_ids,
        "same_tokens_float16": half_ids == hf_ids,
        "transformers": version,
    }


# ----------------------------------------------------------------------------- 3. the app's first render
FIRST_RENDER_DONE = """() => document.querySelectorAll('[data-stale="true"]').length === 0
    && [...document.querySelectorAll('.js-plotly-plot')].filter(p => p.offsetParent !== null).length >= 2
    && [...document.querySelectorAll('.js-plotly-plot')].filter(p => p.offsetParent !== null)
         .every(p => p.querySelector('.heatmaplayer image') || p.querySelector('.barlayer'))"""


def measure_first_render(root: Path, name: str) -> float | str:
    """Seconds from opening the page of a fresh server to every visible heatmap drawn (the model loads on the first
    visit), or why it was skipped."""
    from .serve import CHROMIUM, CHROMIUM_ARGS, streamlit_server

    if not CHROMIUM.exists():
        return f"skipped: {CHROMIUM} is missing (make browser installs it)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return "skipped: playwright is not installed (the test extra)"
    log = REPO / "test-artifacts" / "streamlit-nllb-size.log"
    with streamlit_server(root, name, log, timeout=180) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 2200})
            start = time.perf_counter()
            page.goto(url, timeout=600_000)
            page.wait_for_function(FIRST_RENDER_DONE, timeout=900_000, polling=100)
            return time.perf_counter() - start
        finally:
            browser.close()


# ----------------------------------------------------------------------------- report
def report(imported: dict[str, float], translation: dict[str, Any] | None, first: float | str | None) -> str:
    gb = 1e9
    weights = imported["weights_bytes"]
    rows = [
        "| measurement | result |",
        "|---|---|",
        f"| weights (float32 safetensors) | {weights / gb:.2f} GB |",
        f"| `import-hf` wall time | {imported['seconds']:.1f} s |",
        f"| `import-hf` peak RSS | {imported['peak_bytes'] / gb:.2f} GB = {imported['peak_bytes'] / weights:.2f}× the "
        f"weights (goal ≤ 1.5×: {'met' if imported['peak_bytes'] <= 1.5 * weights else '**not met**'}) |",
    ]
    if translation:
        t = translation["times"]
        lab, hf, half = (statistics.median(t[k]) for k in ("lab", "transformers", "lab, float16 weights"))
        rows += [
            f"| `core.load` of the checkpoint | {translation['load_seconds']:.1f} s |",
            f"| one traced translation, {STEPS} steps, every head: the lab, float32 | {median(t['lab'])} |",
            f"| transformers {translation['transformers']} `generate(output_attentions=True)`, eager, float32 | "
            f"{median(t['transformers'])} |",
            f"| transformers ÷ lab (goal ≥ 2×) | {hf / lab:.2f}× ({'met' if hf / lab >= 2 else '**not met**'}) |",
            "| the lab with float16-rounded weights (`import-hf --dtype float16`) | "
            f"{median(t['lab, float16 weights'])}; transformers ÷ it {hf / half:.2f}× |",
            f"| same tokens as transformers (float32 / float16 weights) | {translation['same_tokens']} / "
            f"{translation['same_tokens_float16']} |",
            "| the floor: the same steps' matrices streamed once each and nothing else (float32 / float16 weights) | "
            f"{median(t['floor, float32'])} / {median(t['floor, float16 weights'])}; transformers ÷ the float32 "
            f"floor {hf / statistics.median(t['floor, float32']):.2f}× |",
        ]
    if first is not None:
        shown = first if isinstance(first, str) else f"{first:.1f} s"
        rows.append(f"| the app's first render (fresh server, page opened → every heatmap drawn) | {shown} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=nllb_folder.DEFAULT_OUT, help="default: %(default)s")
    parser.add_argument("--root", type=Path, default=REPO / "downloads" / "nllb-root", help="checkpoint root to use")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of each translation (default 3)")
    parser.add_argument("--skip-translation", action="store_true")
    parser.add_argument("--skip-browser", action="store_true")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "nllb_size.md", help="report to write")
    args = parser.parse_args(argv)
    folder = nllb_folder.ensure(args.folder)
    name = "nllb-600m-shape"
    loads = [f"load average at the start {load_average()}"]
    imported = measure_import(folder, args.root / name)
    loads.append(f"after the import {load_average()}")
    translation = None if args.skip_translation else measure_translation(folder, args.root / name, args.rounds)
    loads.append(f"after the translations {load_average()}")
    first = None if args.skip_browser else measure_first_render(args.root, name)
    loads.append(f"at the end {load_average()}")
    text = "\n".join(
        [
            "# NLLB-600M's shape, random weights (`python -m benchmarks.nllb_size`)",
            "",
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
            f"{THREADS} torch threads for the translations; {'; '.join(loads)}.",
            "",
            report(imported, translation, first),
            "",
        ]
    )
    args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
