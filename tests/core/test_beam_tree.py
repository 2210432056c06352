"""Beam search's recorded history (``beam_search(history=...)``, ``Bundle.beam_tree``) and forced prefixes
(``Bundle.translate_from``): the tree's winner is beam search's output, every score is its parent's plus
the model's own log-probability, beam 1 is the greedy path, and a forced prefix continues as teacher forcing
says it should."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import build_tiny_checkpoint, tiny_config

import core
from core import InferenceOptions, InputError, Recorder, Transformer
from core.decoding.search import BeamStep, beam_search, greedy, suppress
from core.recording.call import Call
from core.results import BeamTree

OPTS = InferenceOptions()


@pytest.fixture(params=["attention", "ssru"])
def model(request: pytest.FixtureRequest) -> Transformer:
    """A random model whose eos is likely enough that some hypotheses finish before max_len."""
    torch.manual_seed(5)
    m = Transformer(tiny_config(decoder_self=request.param, tie_output=False, output_bias=True)).eval()
    with torch.no_grad():
        m.output.weight.mul_(4.0)
        m.output.bias[m.config.eos_id] += 2.5
    return m


@pytest.fixture(scope="module", params=["tiny", "tiny-ssru"])
def bundle(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> core.Bundle:
    root = tmp_path_factory.mktemp("beam_tree")
    if request.param == "tiny":
        path = build_tiny_checkpoint(root / "tiny", seed=3)
    else:
        path = build_tiny_checkpoint(root / "tiny-ssru", seed=0, decoder_self="ssru", start="zeros")
    return core.load(path, device="cpu")


def sources(n: int = 4, T: int = 6) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(4, 64, (1, T), generator=g) for _ in range(n)]


def log_probs(model: Transformer, src: torch.Tensor, prefix: list[int], options: InferenceOptions = OPTS):
    """The model's log-probabilities (V,) for the piece after ``prefix``, by a teacher-forced pass (no cache)."""
    tgt = torch.tensor([[model.config.bos_id] + prefix])
    with torch.no_grad():
        logits = model(src, tgt, call=Call(options=options))[0, -1]
    return suppress(torch.log_softmax(logits.float(), dim=-1), model.config, float("-inf"))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("beam_size", [1, 2, 3, 5])
def test_history_does_not_change_the_result_and_its_winner_is_a_kept_hypothesis(model, beam_size, causal):
    options = InferenceOptions(causal_mask=causal)
    for src in sources():
        keep = torch.ones_like(src, dtype=torch.bool)
        plain = beam_search(model, src, keep, call=Call(options=options, max_len=12, beam_size=beam_size))
        history: list[BeamStep] = []
        recorded = beam_search(
            model, src, keep, call=Call(options=options, max_len=12, beam_size=beam_size), history=history
        )
        assert recorded == plain
        assert len(history) >= len(plain) and [s.step for s in history] == list(range(len(history)))
        last = history[len(plain) - 1]
        assert any(last.path(j) == plain for j in range(last.n_kept))


def test_scores_are_parent_scores_plus_the_models_log_probabilities(model):
    finished = 0
    for src in sources(2):
        keep = torch.ones_like(src, dtype=torch.bool)
        history: list[BeamStep] = []
        beam_search(
            model,
            src,
            keep,
            call=Call(options=OPTS, fast=core.FastWeights(model), max_len=10, beam_size=3),
            history=history,
        )
        for step in history:
            n = step.tokens.shape[0]
            assert step.tokens.shape == (n, step.step) and step.scores.shape == (n,)
            assert step.cross_attention.shape == (n, 2, 2, src.shape[1])
            np.testing.assert_allclose(step.cross_attention.sum(-1), 1.0, atol=1e-5)
            np.testing.assert_array_equal(
                step.candidate_scores, step.scores[step.candidate_parents] + step.candidate_logp
            )
            assert np.all(np.diff(step.candidate_scores) <= 1e-6)  # best first: kept, then the pruned
            assert step.n_kept == 3 and len(step.candidate_ids) <= 6
            np.testing.assert_array_equal(step.finished[:3], step.candidate_ids[:3] == model.config.eos_id)
            assert not step.finished[3:].any()
            for row in range(n):
                prefix = [int(i) for i in step.tokens[row]]
                expected = log_probs(model, src, prefix)
                for j in np.flatnonzero(step.candidate_parents == row):
                    assert step.candidate_logp[j] == pytest.approx(float(expected[step.candidate_ids[j]]), abs=1e-4)
                rec = Recorder(model)
                with torch.no_grad():
                    model(src, torch.tensor([[model.config.bos_id] + prefix]), call=Call(options=OPTS, recorder=rec))
                trace = rec.freeze()
                for layer in range(2):
                    np.testing.assert_allclose(
                        step.cross_attention[row, layer], trace.attention("cross", layer)[:, -1], atol=1e-5
                    )
        for before, after in zip(history, history[1:], strict=False):  # the live rows are the kept, unfinished ones
            alive = before.alive
            assert [before.path(j) for j in alive] == after.tokens.tolist()
            np.testing.assert_array_equal(after.scores, before.candidate_scores[alive])
        finished += sum(int(s.finished.sum()) for s in history)
    assert finished or model.config.decoder_self == "ssru"  # hypotheses that end early were seen too


def test_bundle_beam_tree_winner_equals_the_beam_translation(bundle):
    text = "The cat sleeps on the warm chair."
    for beam_size in (2, 4):
        tree = bundle.beam_tree(text, beam_size=beam_size, max_len=12)
        out = bundle.translate(text, beam_size=beam_size, max_len=12)
        assert list(tree.output_ids) == out.trace["output.ids"].tolist()
        assert tree.meta["text"] == out.text and tree.beam_size == beam_size
        path = tree.winner_path
        assert len(path) == len(tree.output_ids)
        for t, j in enumerate(path):
            assert int(tree.steps[t].candidate_ids[j]) == tree.output_ids[t] and j < tree.steps[t].n_kept
            if t:
                assert tree.parent_candidate(t, j) == path[t - 1]
        assert tree.src_tokens == tuple(out.src_tokens)
        assert all(tree.piece(i) != f"<{i}>" for i in tree.output_ids)


def test_beam_one_tree_is_the_greedy_path(bundle):
    text = "Is there any tea left?"
    tree = bundle.beam_tree(text, beam_size=1, max_len=12)
    out = bundle.translate(text, max_len=12)
    assert list(tree.output_ids) == list(tree.greedy_ids) == out.trace["output.ids"].tolist()
    assert tree.divergence is None and tree.meta["greedy_text"] == out.text
    assert all(s.tokens.shape[0] == 1 and s.n_kept == 1 for s in tree.steps)
    assert tree.winner_path == (0,) * len(tree.output_ids)
    np.testing.assert_allclose(
        [np.exp(s.candidate_logp[0]) for s in tree.steps], out.trace["output.probs"], rtol=1e-4, atol=1e-6
    )


def test_divergence_is_the_first_position_where_greedy_differs():
    def tree(out: tuple[int, ...], greedy_ids: tuple[int, ...]) -> BeamTree:
        return BeamTree((), out, greedy_ids, (), {}, 2, 1.0, OPTS, 0)

    assert tree((5, 6, 7), (5, 6, 7)).divergence is None
    assert tree((5, 6, 7), (5, 9, 7)).divergence == 1
    assert tree((5, 6), (5, 6, 7)).divergence == 2
    assert tree((), ()).winner_path == ()


def test_beam_tree_checks_its_arguments(bundle):
    with pytest.raises(InputError, match="beam_size"):
        bundle.beam_tree("Hello.", beam_size=0)
    with pytest.raises(InputError, match="empty"):
        bundle.beam_tree("   ", beam_size=2)


# ----------------------------------------------------------------------------- forced prefixes ("what if")
def teacher_forced_trace(bundle: core.Bundle, out: core.Translation) -> core.Trace:
    src = torch.tensor(out.trace["ids.src"][None])
    tgt = torch.tensor(out.trace["ids.tgt"][None])
    rec = Recorder(bundle.model)
    with torch.no_grad():
        logits = bundle.model(src, tgt, call=Call(recorder=rec))
    trace = rec.freeze()
    return trace, suppress(torch.softmax(logits[0].float(), dim=-1), bundle.config, 0.0)


def test_a_forced_prefix_starts_the_output_and_greedy_continues_as_teacher_forcing_says(bundle):
    text = "The cat sleeps on the warm chair."
    free = bundle.translate(text, max_len=12)
    own = free.trace["output.ids"].tolist()
    alternative = int(free.trace["output.top_ids"][1][1])  # the runner-up at step 2
    prefix = own[:1] + [alternative]
    out = bundle.translate_from(text, prefix, max_len=12)
    ids = out.trace["output.ids"].tolist()
    assert ids[:2] == prefix and out.forced_prefix == 2 and out.trace.meta["forced_prefix"] == 2
    assert free.forced_prefix == 0
    trace, probs = teacher_forced_trace(bundle, out)
    np.testing.assert_array_equal(probs[2:].argmax(-1).numpy(), ids[2:])  # greedy after the prefix
    np.testing.assert_allclose(out.trace["output.probs"], probs[torch.arange(len(ids)), ids].numpy(), atol=1e-5)
    np.testing.assert_array_equal(out.trace["output.top_ids"][1], free.trace["output.top_ids"][1])  # model's own
    for kind in out.trace.kinds:
        if kind == "encoder":
            continue
        for layer in range(2):
            np.testing.assert_allclose(out.trace.attention(kind, layer), trace.attention(kind, layer), atol=1e-5)


def test_a_prefix_of_the_greedy_choices_reproduces_the_greedy_translation(bundle):
    text = "Is there any tea left?"
    free = bundle.translate(text, max_len=12)
    own = free.trace["output.ids"].tolist()
    for n in (1, 3, len(own)):
        out = bundle.translate_from(text, own[:n], max_len=12)
        assert out.text == free.text and out.trace["output.ids"].tolist() == own
        for name in ("output.probs", "output.top_probs", "decoder.1.cross.weights"):
            np.testing.assert_array_equal(out.trace[name], free.trace[name])


@pytest.mark.parametrize(
    "prefix, message",
    [
        ("abc", "list of target token ids"),
        ([1.5], "whole numbers"),
        ([-1], "whole numbers"),
        ([10**6], "whole numbers"),
        ([True], "whole numbers"),
        (list(range(4, 20)), "more than max_len"),
    ],
)
def test_bad_prefixes_raise_input_errors(bundle, prefix, message):
    with pytest.raises(InputError, match=message):
        bundle.translate_from("Hello.", prefix, max_len=8)


def test_prefix_eos_only_last(bundle):
    eos = bundle.config.eos_id
    with pytest.raises(InputError, match="eos"):
        bundle.translate_from("Hello.", [eos, 5])
    out = bundle.translate_from("Hello.", [5, eos])
    assert out.trace["output.ids"].tolist() == [5, eos] and out.forced_prefix == 2


def test_greedy_prefix_on_a_batch_forces_every_row():
    torch.manual_seed(0)
    m = Transformer(tiny_config()).eval()
    src = torch.randint(4, 64, (3, 5))
    result = greedy(m, src, torch.ones_like(src, dtype=torch.bool), call=Call(options=OPTS, max_len=6, prefix=[7, 9]))
    assert result.tokens[:, 1:3].tolist() == [[7, 9]] * 3
