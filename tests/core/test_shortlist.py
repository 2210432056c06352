"""The lexical shortlist: Marian's binary file read and checked, the rows it keeps, and decoding that scores only
them (greedy, beam, teacher-forced, batched; the plan and the module path), through ``InferenceOptions``."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_config
from marian_folders import write_marian_shortlist

import core
from core import CheckpointError, InferenceOptions, InputError, Transformer
from core.decoding.search import beam_search, greedy
from core.decoding.shortlist import FILE_NAME, Shortlist
from core.recording.call import Call

OPTS = InferenceOptions()
SL = InferenceOptions(shortlist=True)


def test_reads_marians_binary_file_and_keeps_what_the_engine_keeps(tmp_path):
    lists = [[40, 41], [], [50], [41, 60, 61]]  # source words 0..3
    sl = Shortlist.from_marian(write_marian_shortlist(tmp_path / "lex.bin", 4, 2, lists), 64, shared=False)
    assert (sl.frequent, sl.best, sl.vocab_size) == (4, 2, 64)
    rows = sl.rows([0, 3])
    # the 4 most frequent, the words' candidates, then padded to 8 with the next unused ids from `frequent` up
    assert rows == [0, 1, 2, 3, 40, 41, 60, 61]  # 8 already
    assert sl.rows([0, 2]) == [0, 1, 2, 3, 4, 40, 41, 50]  # 7, padded with the first unused id from `frequent` up
    assert sl.rows([0, 3]) == sl.rows([3, 0, 0])  # a set: order and repeats do not matter
    assert 50 not in rows and 50 in sl.rows([2])
    shared = Shortlist.from_marian(tmp_path / "lex.bin", 64, shared=True)
    assert 3 in shared.rows([3]) and 33 in shared.rows([33])  # a source word's own id (one vocabulary)
    assert 33 not in sl.rows([33])  # beyond the file's source words: no candidates, not an error
    assert sl.rows([]) == [0, 1, 2, 3, 4, 5, 6, 7]  # the frequent ones, padded
    assert sl != shared and sl == sl  # compared by identity (it holds arrays)


def test_bad_shortlist_files_are_refused_with_what_is_wrong(tmp_path):
    good = write_marian_shortlist(tmp_path / "lex.bin", 2, 1, [[5], [6]])
    raw = good.read_bytes()
    cases = {
        "short.bin": (raw[:20], "too short"),
        "magic.bin": (b"\0" * 8 + raw[8:], "magic"),
        "cut.bin": (raw[:-4], "header says"),
    }
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(CheckpointError, match=message):
            Shortlist.from_marian(tmp_path / name, 64, shared=False)
    with pytest.raises(CheckpointError, match="target ids must lie"):
        Shortlist.from_marian(good, 6, shared=False)  # id 6 in a 6-word vocabulary
    (tmp_path / FILE_NAME).write_bytes(b"junk")
    with pytest.raises(CheckpointError, match="not a readable shortlist"):
        Shortlist.load(tmp_path / FILE_NAME)


def test_saved_and_loaded_it_is_the_same_shortlist(tmp_path):
    sl = Shortlist.from_marian(write_marian_shortlist(tmp_path / "lex.bin", 3, 2, [[9, 10], [11]]), 64, shared=True)
    sl.save(tmp_path / FILE_NAME)
    back = Shortlist.load(tmp_path / FILE_NAME)
    assert (back.frequent, back.best, back.shared, back.vocab_size) == (3, 2, True, 64)
    assert back.rows([0, 1]) == sl.rows([0, 1])


# ----------------------------------------------------------------------------- decoding
def _src():
    src = torch.tensor([[5, 9, 17, 33, 2]])
    return src, torch.ones_like(src, dtype=torch.bool)


@pytest.mark.parametrize("fast", [False, True])
def test_greedy_over_a_shortlist_is_the_softmax_over_those_rows(peaked, fast):
    src, keep = _src()
    fw = core.FastWeights(peaked) if fast else None
    everything = torch.arange(64)
    full = greedy(peaked, src, keep, call=Call(options=OPTS, fast=fw, max_len=8))
    same = greedy(peaked, src, keep, call=Call(options=OPTS, fast=fw, vocab=everything, max_len=8))
    assert torch.equal(full.tokens, same.tokens)
    for a, b in zip(full.steps, same.steps, strict=True):
        torch.testing.assert_close(a.top_probs, b.top_probs)
        assert torch.equal(a.top_ids, b.top_ids)
    # a shortlist without the full run's first choice: decoding picks among the rows, probabilities renormalised
    first = int(full.tokens[0, 1])
    vocab = torch.tensor([i for i in range(64) if i != first and i % 2 == first % 2])
    short = greedy(peaked, src, keep, call=Call(options=OPTS, fast=fw, vocab=vocab, max_len=8, top_k=5))
    chosen = short.tokens[0, 1 : 1 + short.lengths[0]]
    assert bool(torch.isin(chosen, vocab).all()) and int(chosen[0]) != first
    with torch.inference_mode():  # the same numbers from a teacher-forced full pass, restricted by hand
        logits = peaked(src, short.tokens[:, :-1], src_keep=keep)[0]  # (T, 64)
    for t, step in enumerate(short.steps):
        expected = torch.softmax(logits[t, vocab], -1)
        torch.testing.assert_close(step.top_probs[0], expected.topk(5).values, atol=1e-5, rtol=1e-4)
        assert torch.equal(step.top_ids[0], vocab[expected.topk(5).indices])
        assert float(step.top_probs[0].sum()) <= 1.0 + 1e-5


def test_beam_search_over_a_shortlist(peaked):
    src, keep = _src()
    everything = torch.arange(64)
    assert beam_search(peaked, src, keep, call=Call(options=OPTS, max_len=8, beam_size=3)) == beam_search(
        peaked, src, keep, call=Call(options=OPTS, vocab=everything, max_len=8, beam_size=3)
    )
    vocab = torch.arange(0, 64, 3)
    history: list = []
    out = beam_search(peaked, src, keep, call=Call(options=OPTS, vocab=vocab, max_len=8, beam_size=3), history=history)
    # the same search over every id, with an output bias of -inf outside the list: log_softmax makes them equal
    ruled_out = Transformer(dataclasses.replace(peaked.config, output_bias=True)).eval()
    ruled_out.load_state_dict(peaked.state_dict(), strict=False)
    with torch.no_grad():
        outside = torch.ones(64, dtype=torch.bool)
        outside[vocab] = False
        ruled_out.output.bias.zero_()
        ruled_out.output.bias[outside] = float("-inf")
    reference: list = []
    assert out == beam_search(ruled_out, src, keep, call=Call(options=OPTS, max_len=8, beam_size=3), history=reference)
    for step, ref in zip(history, reference, strict=True):
        assert np.array_equal(step.candidate_ids, ref.candidate_ids)
        assert np.array_equal(step.candidate_parents, ref.candidate_parents)
        np.testing.assert_allclose(step.candidate_scores, ref.candidate_scores, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- through the Bundle
@pytest.fixture(scope="module")
def listed(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> core.Bundle:
    """The tiny checkpoint with a shortlist beside it (every source piece's candidates: 3 ids), loaded."""
    folder = tmp_path_factory.mktemp("listed") / "tiny"
    shutil.copytree(tiny_checkpoint, folder)
    V = core.load(folder, device="cpu").config.tgt_vocab_size
    lists = [[(7 * w + j) % V for j in range(3)] for w in range(V)]
    lex = write_marian_shortlist(folder.parent / "lex.bin", 4, 3, lists)
    Shortlist.from_marian(lex, V, shared=True).save(folder / FILE_NAME)
    return core.load(folder, device="cpu")


def test_the_shortlist_switch_of_a_bundle(listed, tiny_checkpoint):
    text = "the cat sat on the mat"
    src_ids, _ = listed.encode_source(text)
    rows = set(listed.shortlist.rows(src_ids))
    out = listed.translate(text, SL, record=core.Record(top_k=3))
    assert out.options.shortlist and out.trace.meta["shortlist_rows"] == len(rows) < listed.config.tgt_vocab_size
    assert out.trace.meta["shortlist_of"] == listed.config.tgt_vocab_size
    assert set(out.trace["output.ids"].ravel().tolist()) <= rows
    assert set(out.trace["output.top_ids"].ravel().tolist()) <= rows
    assert InferenceOptions.from_dict(out.options.to_dict()) == SL and "shortlist only" in SL.describe()
    full = listed.translate(text, record=core.Record(top_k=3))
    assert "shortlist_rows" not in full.trace.meta and not full.options.shortlist
    # beam search, then its teacher-forced trace, score the same rows
    beam = listed.translate(text, SL, beam_size=3)
    assert set(beam.trace["output.ids"].ravel().tolist()) <= rows and beam.trace.meta["shortlist_rows"] == len(rows)
    # a forced or given word outside the list: probability 0, as for the engine; inside it: the restricted softmax
    V = listed.config.tgt_vocab_size
    outside = next(i for i in range(4, V) if i not in rows)
    inside = next(i for i in sorted(rows) if i > 3 and i != listed.config.eos_id)
    forced = listed.translate_from(text, [outside, inside], SL)
    assert forced.trace["output.ids"][:2].tolist() == [outside, inside]
    assert float(forced.trace["output.probs"][0]) == 0.0 and forced.trace.meta["shortlist_rows"] == len(rows)
    scored = torch.tensor(sorted(rows))
    src = torch.tensor([src_ids])
    with torch.inference_mode():
        logits = listed.model(src, torch.tensor([[listed.config.bos_id, outside]]))[0]  # (2, V)
    expected = float(torch.softmax(logits[1, scored], -1)[sorted(rows).index(inside)])
    assert float(forced.trace["output.probs"][1]) == pytest.approx(expected, rel=1e-4)
    tf = listed.teacher_forced(text, listed.tokenizer.decode([outside, inside]), SL)
    given = tf.trace["output.ids"].tolist()
    with torch.inference_mode():
        full = listed.model(src, torch.tensor([[listed.config.bos_id, *given[:-1]]]))[0]  # (T, V)
    for t, i in enumerate(given):
        want = float(torch.softmax(full[t, scored], -1)[sorted(rows).index(i)]) if i in rows else 0.0
        assert float(tf.trace["output.probs"][t]) == pytest.approx(want, rel=1e-4, abs=1e-7)
    assert tf.trace.meta["shortlist_rows"] == len(rows)
    outs = listed.translate_batch([text, "a dog"], SL)
    both = set(listed.shortlist.rows(src_ids + listed.encode_source("a dog")[0]))
    assert len(outs) == 2 and all(out.trace.meta["shortlist_rows"] == len(both) for out in outs)
    # a model without a shortlist says so
    plain = core.load(tiny_checkpoint, device="cpu")
    assert plain.shortlist is None
    with pytest.raises(InputError, match="no lexical shortlist"):
        plain.translate(text, SL)


def test_a_shortlist_for_another_vocabulary_is_refused(listed, tmp_path):
    other = Shortlist.from_marian(write_marian_shortlist(tmp_path / "lex.bin", 2, 1, [[1]]), 10, shared=False)
    with pytest.raises(CheckpointError, match="shortlist is for 10 target ids"):
        core.Bundle(listed.model, listed.tokenizer, listed.info, None, shortlist=other)


def test_cli_translate_with_the_shortlist(listed, capsys):
    from core.cli import main

    text = "the cat sat on the mat"
    assert main(["translate", "--checkpoint", str(listed.path), "--shortlist", "--json", text]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["options"]["shortlist"] is True and data["text"] == listed.translate(text, SL).text
    assert main(["info", str(listed.path)]) == 0
    assert "shortlist:   lexical, 4 most frequent + 3 best" in capsys.readouterr().out


def test_analyses_that_score_every_id_refuse_the_shortlist(listed):
    from core.analysis.attribution import attribute
    from core.analysis.importance import head_importance, head_importance_estimate
    from core.analysis.patching import activation_patching

    src, _ = listed.encode_source("the cat sat")
    out = [5, 6, listed.config.eos_id]
    for call, what in [
        (lambda: attribute(listed, src, out, 0, options=SL), "attribution"),
        (lambda: head_importance(listed, src, out, options=SL), "head importance"),
        (lambda: head_importance_estimate(listed, src, out, options=SL), "head importance"),
        (lambda: activation_patching(listed, src, src, out, options=SL), "activation patching"),
    ]:
        with pytest.raises(InputError, match=f"{what} scores the whole vocabulary"):
            call()


def test_a_decoding_state_rebuilds_its_plan_when_the_vocabulary_changes(peaked):
    from core.fast.plan import DecoderState

    src, keep = _src()
    fw = core.FastWeights(peaked)
    with torch.inference_mode():
        memory = peaked.encode(src, keep, call=Call(fast=fw))
        state = DecoderState.empty(peaked.config.n_decoder_layers)
        start = torch.tensor([[peaked.config.bos_id]])
        short = peaked.decode(start, memory, None, call=Call(fast=fw, vocab=torch.arange(0, 64, 2)), state=state)
        after = peaked.decode(torch.tensor([[9]]), memory, None, call=Call(fast=fw), state=state)  # now over every id
        fresh = DecoderState.empty(peaked.config.n_decoder_layers)
        first = peaked.decode(start, memory, None, call=Call(fast=fw), state=fresh)
        second = peaked.decode(torch.tensor([[9]]), memory, None, call=Call(fast=fw), state=fresh)
    assert short.shape[-1] == 32 and after.shape[-1] == 64
    torch.testing.assert_close(short, first[..., ::2])
    torch.testing.assert_close(after, second)


def test_a_suppressed_id_in_the_shortlist_is_never_chosen():
    torch.manual_seed(5)
    model = Transformer(tiny_config(tie_output=False, output_bias=True, suppress_ids=(7,))).eval()
    with torch.no_grad():
        model.output.bias[7] = 50.0  # the model's favourite everywhere: only the suppression keeps it out
    src, keep = _src()
    vocab = torch.tensor([2, 5, 7, 9, 11, 13, 17, 19])
    out = greedy(model, src, keep, call=Call(options=OPTS, vocab=vocab, max_len=6, top_k=8))
    assert 7 not in out.tokens[0, 1:].tolist()
    for step in out.steps:
        assert float(step.top_probs[0][step.top_ids[0] == 7].sum()) == 0.0
    beam = beam_search(model, src, keep, call=Call(options=OPTS, vocab=vocab, max_len=6, beam_size=3))
    assert 7 not in beam and set(beam) <= set(vocab.tolist())
