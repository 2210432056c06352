"""The generation rules an imported folder sets (``core.decoding.generation_rules``: min_length, no_repeat_ngram_size,
forced_eos_token_id), checked against transformers 5.23 itself: the n-gram rule against its logits processor, and
greedy and beam-4 ids against ``generate`` on tiny folders built here (``tests/hf_bart_folders.py``,
``tests/marian_folders.py``), each rule written into the folder's generation_config.json, imported, and shown to
change ``generate``'s output (so a decoder without the rule would fail). Also: the trace says which rules were in
force and records what the model chose among; the teacher-forced pass that records a beam's winner sees the same
bans; export-hf writes the rules back and a re-import keeps them; the card says what was applied and what not.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from conftest import tiny_config
from hf_bart_folders import ENGLISH, build_bart_folder
from hf_beam import make_eos_likely
from marian_folders import marian_model, save_folder, write_tokenizer

import core
from core import InputError, ModelConfig
from core.cli import main
from core.decoding.generation_rules import banned, forced_id, penalise, rules_in_force
from core.decoding.search import forced_ids
from core.exporters.ct2 import export_ct2
from core.exporters.verify import ct2_decoding, ct2_target_prefix, ct2_translate, ct2_vocabulary
from core.importers import hf_families
from core.inputs import clean_text

transformers = pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")
pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")

MAX_NEW = 10
TEXTS = [ENGLISH[1], ENGLISH[4], "The dog sleeps near the window, I think.", "Is there any tea left?", ENGLISH[5]]
OFF: dict[str, Any] = {
    "min_length": 0,
    "no_repeat_ngram_size": 0,
    "forced_eos_token_id": None,
    "encoder_no_repeat_ngram_size": 0,
    "repetition_penalty": 1.0,
}
NAMES = {  # a rule -> its generation_config.json fields; 'all': the first three together (what CTranslate2 has too)
    "min_length": ["min_length"],
    "ngram": ["no_repeat_ngram_size"],
    "forced_eos": ["forced_eos_token_id"],
    "encoder_ngram": ["encoder_no_repeat_ngram_size"],
    "penalty": ["repetition_penalty"],
    "encoder_bigram": ["encoder_no_repeat_ngram_size"],
    "all": ["min_length", "no_repeat_ngram_size", "forced_eos_token_id"],
}


def rules(family: str, name: str) -> dict[str, Any]:
    """One rule's generation_config.json fields, the others off (``NAMES``)."""
    on = {
        "min_length": 6,
        "no_repeat_ngram_size": 2,
        "forced_eos_token_id": {"bart": 2, "marian": 0}[family],
        "encoder_no_repeat_ngram_size": 1,
        "repetition_penalty": 3.0,
    }
    if name == "encoder_bigram":  # the tail of the decoder's inputs matched against the source's bigrams
        on["encoder_no_repeat_ngram_size"] = 2
    return {**OFF, **{key: on[key] for key in NAMES[name]}}


def build_bart(root: Path) -> SimpleNamespace:
    """A BART folder whose eos is likely enough that outputs end after a few tokens (so min_length matters)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    folder = build_bart_folder(root / "hf")
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    make_eos_likely(model, [tok([t], return_tensors="pt") for t in TEXTS], 2, gap=0.5, rounds=3)
    model.save_pretrained(folder, safe_serialization=True)
    return SimpleNamespace(folder=folder, tok=tok, model=model)


def build_marian(root: Path) -> SimpleNamespace:
    """An Opus-MT-style Marian folder whose random model repeats one token (so the n-gram rule matters)."""
    from transformers import MarianTokenizer

    vocab = write_tokenizer(root / "hf", (70, 60))
    model = marian_model(vocab, seed=0, pad_bias=5.0)
    folder = save_folder(model, root / "hf")
    return SimpleNamespace(folder=folder, tok=MarianTokenizer.from_pretrained(folder), model=model)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, SimpleNamespace]:
    """Each family's folder, built on first use and kept for the module (the tests' family parameters interleave:
    a parametrized module fixture was built again at each switch, 8 builds instead of 2)."""
    return {}


@pytest.fixture(params=["bart", "marian"])
def family(request, folders, tmp_path_factory):
    if request.param not in folders:
        root = tmp_path_factory.mktemp(request.param)
        built = {"bart": build_bart, "marian": build_marian}[request.param](root)
        folders[request.param] = SimpleNamespace(name=request.param, root=root, without_rules={}, **vars(built))
    return folders[request.param]


def with_rules(case: SimpleNamespace, settings: dict[str, Any], name: str) -> core.Bundle:
    """The folder imported as ``name`` with ``settings`` written into its generation_config.json (put back after)."""
    path = case.folder / "generation_config.json"
    saved = path.read_text()
    path.write_text(json.dumps({**json.loads(saved), **settings}, indent=2))
    try:
        return core.load(hf_families.convert(case.folder, case.root / name), device="cpu")
    finally:
        path.write_text(saved)


def generate(case: SimpleNamespace, text: str, beams: int, settings: dict[str, Any]) -> list[int]:
    with torch.inference_mode():
        out = case.model.generate(
            **case.tok([text], return_tensors="pt"),
            num_beams=beams,
            do_sample=False,
            max_new_tokens=MAX_NEW,
            length_penalty=1.0,
            early_stopping=False,
            **settings,
        )
    return out[0, 1:].tolist()


# each rule where it changes this family's outputs: eos comes early in the BART folder, the Marian model repeats
CASES = [("bart", "min_length"), ("bart", "forced_eos"), ("bart", "all")]
CASES += [("marian", "ngram"), ("marian", "forced_eos"), ("marian", "all")]
CASES += [("marian", "penalty"), ("marian", "encoder_ngram"), ("bart", "penalty"), ("marian", "encoder_bigram")]


@pytest.mark.parametrize(("family", "rule"), CASES, indirect=["family"])
def test_greedy_and_beam_ids_equal_generate_under_each_rule(family, rule):
    settings = rules(family.name, rule)
    bundle = with_rules(family, settings, rule)
    cfg = bundle.config
    read = (cfg.min_length, cfg.no_repeat_ngram_size, cfg.forced_eos_id, cfg.encoder_no_repeat_ngram_size)
    assert (*read, cfg.repetition_penalty) == tuple(settings.values())
    texts = TEXTS
    if rule == "encoder_bigram":  # sources that hold the bigrams a translation would write: its own outputs, read back
        outputs = [family.tok.decode(generate(family, text, 1, OFF), skip_special_tokens=True) for text in TEXTS]
        outputs = list(dict.fromkeys(text for text in outputs if text.strip() and clean_text(text) == text))
        texts = [" ".join(outputs), *outputs]  # (as transformers reads them: no text the lab's cleaning changes)
    for beams in (1, 4):
        changed = 0
        for text in texts:
            theirs = generate(family, text, beams, settings)
            ours = [int(i) for i in bundle.translate(text, beam_size=beams, max_len=MAX_NEW).trace["output.ids"]]
            assert ours == theirs, (rule, beams, text)
            key = (text, beams)  # generate's output with every rule off: the same for each rule, made once
            if key not in family.without_rules:
                family.without_rules[key] = generate(family, text, beams, OFF)
            changed += theirs != family.without_rules[key]
        assert changed >= 1, (rule, beams)  # the rule changed generate's output: a decoder without it differs


def test_the_trace_says_which_rules_held_and_records_what_the_model_chose_among(family):
    settings = rules(family.name, "all")
    bundle = with_rules(family, settings, "all-trace")
    eos = bundle.config.eos_id
    held = {"min_length": 6, "eos_banned_steps": 5, "no_repeat_ngram_size": 2, "forced_eos_id": eos}
    for text in TEXTS[:3]:
        out = bundle.translate(text, max_len=MAX_NEW)
        assert out.trace.meta["generation_rules"] == held
        ids, top_ids = out.trace["output.ids"], out.trace["output.top_ids"]
        assert eos not in top_ids[:5].ravel()  # banned: not among the alternatives at the first 5 steps
        assert len(ids) == MAX_NEW or ids[-1] == eos
        if len(ids) == MAX_NEW:
            assert ids[-1] == eos  # forced at the last step
        start = [bundle.config.bos_id, *ids.tolist()]
        for t in range(len(ids)):  # no alternative with a probability would repeat a bigram of the step's inputs
            grams = {tuple(start[i : i + 2]) for i in range(t)}
            allowed = [int(j) for j, p in zip(top_ids[t], out.trace["output.top_probs"][t], strict=True) if p > 0]
            assert all((start[t], j) not in grams for j in allowed), t
        again = bundle.record_more(out)  # one teacher-forced pass over the same ids: the same bans per position
        for name in ("output.probs", "output.top_ids", "output.top_probs"):
            np.testing.assert_allclose(again.trace[name], out.trace[name], atol=1e-5, rtol=0)
        beam = bundle.translate(text, beam_size=4, max_len=MAX_NEW)  # the winner, traced teacher-forced
        tree = bundle.beam_tree(text, beam_size=4, max_len=MAX_NEW)
        seen = [float(step.candidate_logp[j]) for step, j in zip(tree.steps, tree.winner_path, strict=False)]
        recorded = np.log(beam.trace["output.probs"]).tolist()
        for t, (a, b) in enumerate(zip(seen, recorded, strict=True)):
            if forced_id(bundle.config, forced_ids(bundle.config, ()), t, MAX_NEW) is None:
                # (a forced step adds log-probability 0 in the search and records the model's own probability)
                assert a == pytest.approx(b, abs=1e-4), t
        assert eos not in beam.trace["output.top_ids"][:5].ravel()  # the teacher-forced pass banned eos too
        assert beam.trace.meta["generation_rules"] == held == tree.meta["generation_rules"]


def test_the_recorded_probabilities_under_a_repetition_penalty_are_what_each_search_chose_among(family):
    """Greedy decoding penalises the logits, beam search the log-probabilities (as generate's two loops); the
    teacher-forced pass that records a run does as its search did: a greedy run recorded again gives its own
    probabilities, and a beam run's recorded probabilities are the beam's own along the winner's path."""
    bundle = with_rules(family, rules(family.name, "penalty"), "penalty-trace")
    assert bundle.config.repetition_penalty == 3.0
    for text in TEXTS[:3]:
        out = bundle.translate(text, max_len=MAX_NEW)
        again = bundle.record_more(out)
        for name in ("output.probs", "output.top_ids", "output.top_probs"):
            np.testing.assert_allclose(again.trace[name], out.trace[name], atol=1e-5, rtol=0)
        beam = bundle.translate(text, beam_size=4, max_len=MAX_NEW)
        tree = bundle.beam_tree(text, beam_size=4, max_len=MAX_NEW)
        seen = [float(step.candidate_logp[j]) for step, j in zip(tree.steps, tree.winner_path, strict=False)]
        recorded = np.log(beam.trace["output.probs"]).tolist()
        first = forced_ids(bundle.config, ())
        for t, (a, b) in enumerate(zip(seen, recorded, strict=True)):
            if forced_id(bundle.config, first, t, MAX_NEW) is None:
                assert a == pytest.approx(b, abs=1e-4), (text, t)
        assert beam.trace.meta["generation_rules"] == {"repetition_penalty": 3.0}


def test_export_hf_writes_the_rules_back_and_a_reimport_keeps_them(family):
    """Imported with all three rules, exported (the export's own check decodes with transformers, eos forced at its
    length limit as core forces it), re-imported: the same rules and the same ids."""
    settings = rules(family.name, "all")
    bundle = with_rules(family, settings, "all-export")
    out = family.root / "exported"
    assert main(["export-hf", str(bundle.path), str(out), "--text", TEXTS[0]]) == 0
    written = json.loads((out / "generation_config.json").read_text())
    assert {key: written[key] for key in settings} == settings
    assert "greedy output the same" in (out / "README.md").read_text()
    assert main(["import-hf", str(out), "--out", str(family.root / "again")]) == 0
    again = core.load(family.root / "again", device="cpu")
    assert rules_in_force(again.config) == rules_in_force(bundle.config)
    for text in TEXTS[:3]:
        ids = [int(i) for i in bundle.translate(text, max_len=MAX_NEW).trace["output.ids"]]
        assert [int(i) for i in again.translate(text, max_len=MAX_NEW).trace["output.ids"]] == ids


@pytest.mark.parametrize("family", ["bart"], indirect=True)
def test_ctranslate2_decodes_the_rules_it_has_as_core_does(family):
    """export-ct2 of the BART checkpoint with all three rules: CTranslate2's greedy pieces equal core's when given
    ``ct2_decoding``'s options (min_decoding_length, no_repeat_ngram_size; no forced eos there: compared before it),
    on texts whose eos was banned, and the check at export passes."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed: pip install -e '.[ct2]'")
    bundle = with_rules(family, rules("bart", "all"), "all-ct2")
    assert export_ct2(bundle.path, family.root / "ct2")["same_greedy_ids"]
    penalised = with_rules(family, rules("bart", "penalty"), "penalty-ct2")  # a rule CTranslate2 is not checked on
    report = export_ct2(penalised.path, family.root / "ct2-penalty")
    assert report["verified"] is False and "repetition_penalty 3" in report["reason"]
    names, cfg = ct2_vocabulary(family.root / "ct2"), bundle.config
    for text in TEXTS:
        out = bundle.translate(text, max_len=MAX_NEW)
        options, ours = ct2_decoding(cfg, [int(i) for i in out.trace["output.ids"]], MAX_NEW)
        prefix = ct2_target_prefix(family.root / "ct2", cfg, names)
        src = [names[int(i)] for i in out.trace["ids.src"]]
        (theirs,) = ct2_translate(family.root / "ct2", [src], [prefix], **options)
        assert theirs == [names[i] for i in ours if i != cfg.eos_id], text


def test_the_card_says_which_generation_settings_are_applied_and_which_not(family):
    settings = {
        **rules(family.name, "all"),
        "repetition_penalty": 1.3,
        "num_beams": 4,
        "encoder_no_repeat_ngram_size": 0,
        "min_new_tokens": 3,
    }
    bundle = with_rules(family, settings, "all-card")
    card = (bundle.path / "card.md").read_text()
    assert "`min_length=6` (eos banned at the first 5 output steps)" in card
    assert "`no_repeat_ngram_size=2`" in card and "`forced_eos_token_id=" in card
    assert "`repetition_penalty=1.3` (the score of a piece already written" in card
    assert "Not applied: `min_new_tokens=3`." in card  # encoder_no_repeat_ngram_size 0 is off: not listed
    assert "Chosen per call instead: `num_beams=4`" in card
    assert "wherever the settings not applied above leave them alone" in card  # no parity claimed past them
    plain = (with_rules(family, rules(family.name, "all"), "all-card-plain").path / "card.md").read_text()
    assert "Not applied: none set" in plain and "outputs are `generate`'s. " in plain
    others = {  # settings generate applies to greedy or beam search that core does not reproduce: each one listed
        "encoder_repetition_penalty": 1.2,
        "renormalize_logits": True,
        "stop_strings": ["stop"],
        "penalty_alpha": 0.6,
    }
    for n, (key, value) in enumerate(others.items()):
        card = (with_rules(family, {**rules(family.name, "all"), key: value}, f"card-{n}").path / "card.md").read_text()
        assert f"Not applied: `{key}={value!r}`." in card and "wherever the settings not applied" in card, key


def test_the_ngram_rule_bans_what_transformers_bans():
    from transformers.generation.logits_process import NoRepeatNGramLogitsProcessor

    torch.manual_seed(0)
    tokens = torch.randint(0, 4, (64, 12))  # many repeats among 4 ids
    for n in (1, 2, 3, 5):
        for t in range(1, 13):
            cfg = tiny_config(no_repeat_ngram_size=n)
            theirs = NoRepeatNGramLogitsProcessor(n)(tokens[:, :t], torch.zeros(64, 8)) == float("-inf")
            ours = torch.zeros(64, 8, dtype=torch.bool)
            rows, ids = banned(cfg, tokens[:, :t])
            ours[rows, ids] = True
            assert torch.equal(ours, theirs), (n, t)


def test_the_encoder_ngram_rule_bans_what_transformers_bans():
    """encoder_no_repeat_ngram_size: the last id of every source n-gram whose first n - 1 ids end the decoder's
    inputs, per hypothesis, the source shared by a sentence's beams (as EncoderNoRepeatNGramLogitsProcessor)."""
    from transformers.generation.logits_process import EncoderNoRepeatNGramLogitsProcessor

    torch.manual_seed(1)
    source = torch.randint(0, 5, (2, 9))  # two sentences
    tokens = torch.randint(0, 5, (8, 12))  # four beams each
    for n in (1, 2, 3, 4):
        processor = EncoderNoRepeatNGramLogitsProcessor(n, source)
        cfg = tiny_config(encoder_no_repeat_ngram_size=n)
        for t in range(1, 13):
            theirs = processor(tokens[:, :t], torch.zeros(8, 8)) == float("-inf")
            ours = torch.zeros(8, 8, dtype=torch.bool)
            rows, ids = banned(cfg, tokens[:, :t], source.repeat_interleave(4, dim=0))
            ours[rows, ids] = True
            assert torch.equal(ours, theirs), (n, t)
            assert ours.any() or n > 1  # n = 1 bans every source id at every step


def test_the_repetition_penalty_scores_what_transformers_scores():
    """repetition_penalty divides a positive score of an id already in the decoder's input and multiplies a
    negative one (RepetitionPenaltyLogitsProcessor), on every id or on a shortlist's columns."""
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    torch.manual_seed(2)
    tokens, scores = torch.randint(0, 8, (6, 5)), torch.randn(6, 8)
    for penalty in (0.7, 1.0, 1.3, 2.0):
        theirs = RepetitionPenaltyLogitsProcessor(penalty)(tokens, scores.clone())
        ours = penalise(tiny_config(repetition_penalty=penalty), scores, tokens)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
        assert torch.equal(ours, scores) is (penalty == 1.0)
        vocab = torch.tensor([0, 2, 3, 5, 7])  # a shortlist: its columns are these ids
        listed = penalise(tiny_config(repetition_penalty=penalty), scores[:, vocab], tokens, vocab)
        torch.testing.assert_close(listed, theirs[:, vocab], rtol=0, atol=0)


def test_min_length_counts_the_start_token_and_forced_eos_the_last_step():
    cfg = tiny_config(min_length=3, forced_eos_id=2)
    for t, expect in ((1, True), (2, True), (3, False)):  # decoder inputs (start token included) of length t
        rows, ids = banned(cfg, torch.zeros(2, t, dtype=torch.long) + 5)
        assert (cfg.eos_id in ids.tolist()) == expect and sorted(set(rows.tolist())) == ([0, 1] if expect else [])
    assert [forced_id(cfg, [7], step, 4) for step in range(4)] == [7, None, None, 2]
    assert forced_id(cfg, [7], 0, 1) == 2  # both on one step: eos wins, as in transformers' processor list
    assert rules_in_force(tiny_config()) == {}


def test_the_config_keeps_the_rules_and_refuses_bad_ones():
    cfg = tiny_config(min_length=56, no_repeat_ngram_size=3, forced_eos_id=2)
    assert ModelConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    old = {k: v for k, v in cfg.to_dict().items() if k not in ("min_length", "no_repeat_ngram_size", "forced_eos_id")}
    assert rules_in_force(ModelConfig.from_dict(old)) == {}  # a checkpoint from before: every rule off
    bad_ones = ({"min_length": -1}, {"no_repeat_ngram_size": 2.5}, {"forced_eos_id": 10**6}, {"min_length": True})
    bad_ones += (
        {"repetition_penalty": 0.0},
        {"repetition_penalty": float("inf")},
        {"encoder_no_repeat_ngram_size": -2},
    )
    for bad in bad_ones:
        with pytest.raises(InputError, match=next(iter(bad)).replace("_id", "")):
            tiny_config(**bad)
