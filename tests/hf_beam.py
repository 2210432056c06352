"""Beam-search parity with transformers' ``generate(num_beams=4)`` on searches where hypotheses end early, shared by
the parity tests of every imported family (tests/core/importers/test_hf_t5.py, test_hf_bart.py, test_hf_marian.py).

Random weights almost never produce eos, so ``make_eos_likely`` points the output row of eos at the mean of the
decoder states the head reads: eos's logit then sits about ``gap`` below the usual best one at every step and is
among the best candidates of some hypotheses, at different steps. ``compare_beams`` imports the folder once per
setting of ``SETTINGS`` (written into its generation_config.json, which the importer reads) and asserts, per text,
that ``translate(beam_size=4)`` and ``beam_tree`` give ``generate``'s ids; that in every setting a hypothesis ended
while the search went on with the beam still full (where the lab's own beam would have shrunk); and that the
settings changed some output (so they are read and used) and that the beam found something greedy decoding did
not. transformers is imported by the callers: a test extra.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

import core
from core.results import BeamTree

BEAMS, MAX_NEW = 4, 10
# (length_penalty, early_stopping): generate's defaults first, then each other way a search stops
# (core.decoding.beam_finish.TransformersFinish.done: True stops on a full pool; False bounds the live beams at their
# own
# length, "never" with a positive penalty at max_len), with a penalty above 1 and one below. (1.0, True) and
# (0.5, False) were dropped: they took the same branches as (2.0, True) and (1.0, False), the penalty a number there.
SETTINGS: tuple[tuple[float, bool | str], ...] = ((1.0, False), (2.0, True), (0.5, "never"))

Generate = Callable[[str, float, "bool | str"], list[int]]  # (text, length_penalty, early_stopping) -> ids


def make_eos_likely(
    model: Any, inputs: Sequence[dict[str, torch.Tensor]], eos: int, gap: float, *, rounds: int = 1
) -> None:
    """Set the output row of ``eos`` in transformers' ``model`` (in place; save the folder after) so that its logit
    is about ``gap`` below the mean best logit of greedy decoding ``inputs`` (the tokenizer's outputs). rounds: how
    often to measure and set it (with a tied head the row is also eos's input embedding, and mBART's and M2M100's
    decoders start from eos: the states move when it is set; 3 rounds settle them)."""
    for _ in range(rounds):
        _point_eos(model, inputs, eos, gap)


def _point_eos(model: Any, inputs: Sequence[dict[str, torch.Tensor]], eos: int, gap: float) -> None:
    head = model.get_output_embeddings()
    states: list[torch.Tensor] = []
    best: list[torch.Tensor] = []

    def seen(_module: Any, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        states.append(args[0].reshape(-1, args[0].shape[-1]))
        best.append(out.reshape(-1, out.shape[-1]).max(-1).values)

    hook = head.register_forward_hook(seen)
    try:
        with torch.no_grad():
            for x in inputs:
                model.generate(**x, num_beams=1, do_sample=False, max_new_tokens=MAX_NEW)
    finally:
        hook.remove()
    mean = torch.cat(states).mean(0)  # (D,)
    target = float(torch.cat(best).mean()) - gap
    with torch.no_grad():
        head.weight[eos] = mean * target / mean.dot(mean)


def set_beam_settings(folder: Path, length_penalty: float, early_stopping: bool | str) -> None:
    """Write ``length_penalty`` and ``early_stopping`` into the folder's generation_config.json (it must have one:
    without it the importer would read config.json's settings instead)."""
    path = folder / "generation_config.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(length_penalty=length_penalty, early_stopping=early_stopping)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def ended_early(tree: BeamTree) -> bool:
    """Whether some hypothesis ended (eos) at a step after which the search went on with ``beam_size`` live ones."""
    steps = tree.steps
    return any(
        bool(s.finished[: s.n_kept].any()) and steps[t + 1].tokens.shape[0] == tree.beam_size
        for t, s in enumerate(steps[:-1])
    )


def compare_beams(
    folder: Path, import_to: Callable[[Path], core.Bundle], generate: Generate, texts: Sequence[str], out: Path
) -> None:
    """For each of ``SETTINGS``: written into ``folder``, imported by ``import_to`` into a folder under ``out``, our
    beam-4 ids on every text equal ``generate``'s (module docstring for what else is asserted)."""
    outputs: dict[tuple[float, bool | str], list[tuple[int, ...]]] = {}
    greedy: list[tuple[int, ...]] = []
    for length_penalty, early_stopping in SETTINGS:
        set_beam_settings(folder, length_penalty, early_stopping)
        bundle = import_to(out / f"lp{length_penalty}-{early_stopping}")
        cfg = bundle.config
        assert (cfg.beam, cfg.length_penalty, cfg.early_stopping) == ("transformers", length_penalty, early_stopping)
        early, rows = 0, []
        for text in texts:
            theirs = generate(text, length_penalty, early_stopping)
            ours = [int(i) for i in bundle.translate(text, beam_size=BEAMS, max_len=MAX_NEW).trace["output.ids"]]
            tree = bundle.beam_tree(text, beam_size=BEAMS, max_len=MAX_NEW)
            assert ours == theirs, (text, length_penalty, early_stopping)
            assert list(tree.output_ids) == ours and len(tree.winner_path) == len(ours)
            early += ended_early(tree)
            if len(greedy) < len(texts):  # the first setting
                greedy.append(tuple(int(i) for i in bundle.translate(text, max_len=MAX_NEW).trace["output.ids"]))
            rows.append(tuple(ours))
        assert early >= 1, (length_penalty, early_stopping)  # hypotheses ended while the search went on
        outputs[(length_penalty, early_stopping)] = rows
    assert len({tuple(rows) for rows in outputs.values()}) > 1, outputs  # the settings changed some output
    assert any(row != once for row, once in zip(outputs[SETTINGS[0]], greedy, strict=True))  # beam is not greedy
