"""Word alignment from cross-attention and the alignment-head finder, against hand-made gold links."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import core
from core.analysis.alignment import (
    GoldPair,
    aer,
    links,
    parse_links,
    read_gold,
    score_heads,
    word_matrix,
    word_spans,
)
from core.analysis.survey import GOLD_DIR, alignment_scores, gold_pairs

REPO = Path(__file__).resolve().parents[3]


def test_pieces_merge_into_the_words_of_the_whitespace_split() -> None:
    pieces = ["▁The", "▁ca", "t", "▁sle", "eps", ".", "</s>"]
    assert word_spans(pieces) == [[0], [1, 2], [3, 4, 5]]
    assert len(word_spans(pieces)) == len("The cat sleeps.".split())


def test_word_matrix_sums_source_pieces_averages_target_pieces_and_shifts() -> None:
    src = ["▁a", "▁b", "c", "</s>"]
    out = ["▁x", "y", "▁z", "</s>"]  # two target words: pieces {0,1} and {2}
    cross = np.array(
        [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 0.5, 0.5, 0.0],
            [0.0, 0.25, 0.25, 0.5],  # half on </s>: dropped, the rest renormalised
            [0.0, 0.0, 0.0, 1.0],
        ]
    )
    m = word_matrix(cross, src, out)
    np.testing.assert_allclose(m, [[0.5, 0.5], [0.0, 1.0]])
    assert links(m) == {(0, 0), (1, 1)}  # argmax (ties: the first)
    assert links(m, "threshold", 0.5) == {(0, 0), (1, 0), (1, 1)}
    shifted = word_matrix(cross, src, out, shift=1)  # word x from rows 1-2, word z from row 3 (only </s>: empty)
    np.testing.assert_allclose(shifted, [[0.0, 1.0], [0.0, 0.0]])


def test_aer_follows_och_and_ney() -> None:
    g = GoldPair("a b c", "x y z", frozenset({(0, 0)}), frozenset({(0, 0), (1, 1)}))
    assert aer([{(0, 0), (1, 1), (2, 2)}], [g]) == pytest.approx(1 - (1 + 2) / (3 + 1))
    assert aer([{(0, 0)}], [g]) == 0.0
    assert aer([set()], [g]) == 1.0


def test_bad_gold_files_are_named_with_their_line(tmp_path: Path) -> None:
    assert parse_links("0-0 1?2", 2, 3) == ({(0, 0)}, {(0, 0), (1, 2)})
    f = tmp_path / "g.tsv"
    f.write_text("# comment\na b\tx y\t0-0 1-1\na b\tx y\t0-0 5-1\n", encoding="utf-8")
    with pytest.raises(core.InputError, match=r"g.tsv:3: link 5-1 is outside 2 source × 2 target words"):
        read_gold(f)
    f.write_text("a b\tx y\n", encoding="utf-8")
    with pytest.raises(core.InputError, match="g.tsv:1: expected source<TAB>target<TAB>links"):
        read_gold(f)
    f.write_text("a b\tx y\t0:1\n", encoding="utf-8")
    with pytest.raises(core.InputError, match="'0:1' is not a link"):
        read_gold(f)


def test_the_finder_picks_the_head_that_aligns() -> None:
    """Monotone gold; layer 1 head 2 attends to the aligned source word, every other head is uniform."""
    rng = np.random.default_rng(0)
    maps, srcs, outs, gold = [], [], [], []
    for n in range(6):
        k = 3 + n % 3
        src = [f"▁s{i}" for i in range(k)] + ["</s>"]
        out = [f"▁t{i}" for i in range(k)] + ["</s>"]
        m = rng.dirichlet(np.ones(k + 1), size=(2, 3, k + 1))  # (L, H, Tq, Tk): noise
        m[1, 2] = np.eye(k + 1)  # output piece t predicted while looking at source word t
        maps.append(m)
        srcs.append(src)
        outs.append(out)
        words = " ".join(f"w{i}" for i in range(k))
        gold.append(GoldPair(words, words, frozenset((i, i) for i in range(k)), frozenset((i, i) for i in range(k))))
    r = score_heads(maps, srcs, outs, gold)
    assert r.best_head == (1, 2) and r.head_aer[1, 2] == 0.0 and r.best_k == ((1, 2),) and r.shift == 0
    assert (np.delete(r.head_aer.ravel(), 5) > 0.2).all()
    assert r.baselines["first head of the last layer (CTranslate2's default)"] == r.head_aer[1, 0]
    assert r.baselines["last layer average"] == r.layer_aer[1]
    with pytest.raises(core.InputError, match="gold pair 1: its words"):
        score_heads(maps[:1], [srcs[0][1:]], outs[:1], gold[:1])


@pytest.mark.parametrize(
    ("name", "file", "at_least", "own"),
    # the en->pt pairs were written on the previous distilled-en-pt's output; today's student (and its teacher)
    # translate 62 of the 71 sources word for word the same (the others differ in a word or two: "leve"/"pegue")
    [("distilled-en-pt", "align_en_pt.tsv", 50, 0.85), ("ding-en-de", "align_en_de.tsv", 30, 1.0)],
)
def test_gold_targets_are_the_checkpoints_own_translations(name: str, file: str, at_least: int, own: float) -> None:
    path = REPO / "checkpoints" / name
    if not path.is_dir():
        pytest.skip(f"{path} is not there")
    torch.set_num_threads(1)
    bundle = core.load(path, device="cpu")
    gold = read_gold(GOLD_DIR / file)
    assert len(gold) >= at_least and len({g.source for g in gold}) == len(gold)
    outs = bundle.translate_batch([g.source for g in gold])  # one padded batch: the texts one by one were the same
    same = [out.text == g.target for out, g in zip(outs, gold, strict=True)]
    assert sum(same) >= own * len(gold)


def test_real_checkpoint_has_alignment_heads_far_better_than_chance() -> None:
    path = REPO / "checkpoints" / "distilled-en-pt"
    if not path.is_dir():
        pytest.skip(f"{path} is not there")
    bundle = core.load(path, device="cpu")
    gold = gold_pairs(*bundle.languages)
    assert gold is not None
    r = alignment_scores(bundle, gold)
    assert r.n_pairs == len(gold) and r.head_aer.shape == (2, 8)
    assert r.head_aer.min() < 0.2 < np.median(r.head_aer)  # some heads align, most do not
    assert r.best_k_aer <= r.head_aer.min()
    reverse = gold_pairs("pt", "en")  # the en→pt file read the other way round
    assert reverse is not None and reverse[0].source == gold[0].target
    assert {(j, i) for i, j in gold[0].sure} == set(reverse[0].sure)
    assert gold_pairs("fr", "en") is None


def _word_matrix_by_hand(cross, src, out, shift):
    """The definition, written out: each target word's rows (shifted) averaged, each source word's pieces summed."""
    src_words, tgt_words = word_spans(src), word_spans(out)
    m = np.zeros((len(tgt_words), len(src_words)))
    for w, pieces in enumerate(tgt_words):
        rows = [t + shift for t in pieces if t + shift < cross.shape[0]]
        if rows:
            row = cross[rows].mean(0)
            m[w] = [row[cols].sum() for cols in src_words]
    total = m.sum(1, keepdims=True)
    return np.divide(m, total, out=np.zeros_like(m), where=total > 0)


@pytest.mark.parametrize("seed", range(6))
def test_pooling_every_head_at_once_equals_the_word_matrix_definition(seed: int) -> None:
    from core.analysis.alignment import normalised, pooling

    rng = np.random.default_rng(seed)
    pieces = ["▁a", "b", "▁c", "▁d", "e", "f", "▁g", "</s>", "<unk>", "▁h"]
    src = [pieces[i] for i in rng.integers(0, len(pieces), rng.integers(3, 9))] + ["</s>"]
    out = [pieces[i] for i in rng.integers(0, len(pieces), rng.integers(2, 8))] + ["</s>"]
    maps = rng.random((2, 3, len(out), len(src)))  # (L, H, Tq, Tk)
    for shift in (0, 1):
        rows, cols = pooling(src, out, maps.shape, shift=shift)
        every = rows @ maps @ cols  # (L, H, target words, source words)
        for layer in range(2):
            for head in range(3):
                want = _word_matrix_by_hand(maps[layer, head], src, out, shift)
                np.testing.assert_allclose(normalised(every[layer, head]), want, atol=1e-12)
                np.testing.assert_allclose(word_matrix(maps[layer, head], src, out, shift=shift), want, atol=1e-12)
        mean = normalised(every.mean((0, 1)))  # an average of heads pools to the average of their pooled maps
        np.testing.assert_allclose(mean, _word_matrix_by_hand(maps.mean((0, 1)), src, out, shift), atol=1e-12)


@pytest.mark.parametrize("shape", ["plain", "marian", "marian-ssru"])
def test_gold_cross_attention_in_padded_batches_equals_one_pass_per_pair(
    tiny_checkpoint: Path, monkeypatch, shape: str
) -> None:
    """Against ``Bundle.teacher_forced``, one pair at a time: a plain model, and Marian-shaped ones whose pad id is
    also eos and bos (only the keep flags tell padding apart) and whose first decoder input is a zero vector;
    a bundle that cuts long targets."""
    import dataclasses

    from conftest import tiny_config

    from core.analysis import survey

    bundle = core.load(tiny_checkpoint, device="cpu")
    if shape != "plain":
        V = bundle.config.tgt_vocab_size
        config = tiny_config(
            src_vocab_size=V,
            tgt_vocab_size=V,
            pad_id=0,
            bos_id=0,
            eos_id=0,
            start="zeros",
            decoder_self="ssru" if shape == "marian-ssru" else "attention",
        )
        torch.manual_seed(1)
        model = core.Transformer(config).eval()
        bundle = core.Bundle(model, bundle.tokenizer, bundle.info, None, max_source_tokens=20)
        assert dataclasses.asdict(bundle.config)["pad_id"] == bundle.config.eos_id
    pairs = [
        ("the cat sat", "the cat"),
        ("a dog slept on the warm mat today", "a dog"),
        ("hello", "hello there my friend"),
        ("the dog", "the dog sat on the warm mat and the cat slept on the old chair by the door all day long"),
    ]
    monkeypatch.setattr(survey, "GOLD_BATCH", 2)  # a full batch and a last one of one
    maps, src_pieces, out_pieces = survey.gold_cross_attention(bundle, pairs)
    if shape != "plain":
        assert len(out_pieces[-1]) == bundle.max_source_tokens + 1  # the long target cut, eos added
    for (source, target), m, s, o in zip(pairs, maps, src_pieces, out_pieces, strict=True):
        one = bundle.teacher_forced(source, target, record=core.Record(qkv=False))
        assert s == one.src_tokens and o == one.output_tokens
        want = np.stack([one.trace.attention("cross", layer) for layer in range(2)])  # (L, H, Tq, Tk)
        assert m.shape == want.shape
        np.testing.assert_allclose(m, want, rtol=1e-5, atol=1e-6)
