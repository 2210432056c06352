"""BART / mBART / M2M100 / NLLB folders -> core checkpoints (``python -m core import-hf``), checked against
transformers itself on folders built here (``tests/hf_bart_folders.py``): source ids equal the folder's own tokenizer's;
greedy and beam-4 ids equal ``generate``'s (the target language forced first where the family does that); every
layer's encoder, decoder and cross-attention equal ``output_attentions`` within 1e-4.

Beam search: an imported folder decodes with transformers' beam policy (``ModelConfig.beam``,
``core.decoding.beam_finish``);
the beam test makes eos likely so that hypotheses end early and compares several length penalties and early_stopping
values (``tests/hf_beam.py``)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from conftest import build_tiny_checkpoint
from hf_bart_folders import ENGLISH, build_bart_folder, build_m2m100_folder, build_mbart_folder
from hf_beam import BEAMS, MAX_NEW, compare_beams, make_eos_likely
from hf_wild_folders import imported_case

import core
from core import CheckpointError, InputError
from core.cli import main
from core.importers import hf_families

transformers = pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")

TEXTS = [ENGLISH[1], ENGLISH[4], "The dog sleeps near the window, I think.", "Is there any tea left?"]
BUILDERS = {
    "bart": build_bart_folder,
    "mbart": build_mbart_folder,
    "m2m100": build_m2m100_folder,
    "nllb": lambda path: build_m2m100_folder(path, nllb=True),
}
EOS_GAP = {"bart": 2.0, "mbart": 0.0, "m2m100": 0.25, "nllb": 0.5}  # flatter outputs need eos nearer the best
FORCED = {"bart": "<s>", "mbart": "de_DE", "m2m100": "__de__", "nllb": "deu_Latn"}  # each folder's first output


def generate(case: SimpleNamespace, text: str, beams: int = 1, **settings: Any) -> list[int]:
    """transformers' output ids for ``text`` (the decoder's start token left out); ``settings``: length_penalty and
    early_stopping (else 1.0 and the folder's)."""
    with torch.inference_mode():
        out = case.model.generate(
            **case.tok([text], return_tensors="pt"),
            num_beams=beams,
            do_sample=False,
            max_new_tokens=MAX_NEW,
            forced_eos_token_id=None,
            **{"length_penalty": 1.0, **settings},
        )
    return out[0, 1:].tolist()


@pytest.fixture(scope="module", params=list(BUILDERS))
def case(request, tmp_path_factory):
    """A folder built with transformers, its model and tokenizer, and the checkpoint import-hf made of it."""
    return imported_case(request.param, tmp_path_factory.mktemp(request.param), BUILDERS[request.param])


def test_source_ids_and_text_are_the_folders_own_tokenizers(case):
    for text in TEXTS + ["Ein Wort mit ☃ darin."]:
        assert case.bundle.encode_source(text)[0] == case.tok(text).input_ids, text
    tokenizer = case.bundle.tokenizer
    ids = tokenizer.encode("The cat sleeps.")
    assert tokenizer.decode(ids) == case.tok.decode(ids, skip_special_tokens=True).strip() == "The cat sleeps."
    assert case.bundle.config.forced_bos_id == case.model.generation_config.forced_bos_token_id
    assert tokenizer.piece(case.bundle.config.forced_bos_id) == FORCED[case.name]


def test_pieces_show_the_word_start_as_every_tokenizer_here_does(case):
    """BART's byte-level pieces ('Ġcat') are shown as the lab shows SentencePiece's ('▁cat'); a piece inside a
    character shows its bytes; the pieces read back into the text."""
    tokenizer = case.bundle.tokenizer
    for text in ("The cat sleeps on the warm chair.", "Ein Wort mit ☃ darin."):
        pieces = tokenizer.pieces(tokenizer.encode(text))
        assert not any("Ġ" in p for p in pieces), pieces
        if case.name == "bart":  # byte-level: the text comes back exactly, spaces as ▁
            shown = "".join(pieces).replace("\u2581", " ")
            # a piece inside a character shows its bytes (☃'s may be pieces of their own): read back, the text
            whole = re.sub(r"(?:\\x[0-9a-f]{2})+", lambda m: bytes.fromhex(m[0].replace("\\x", "")).decode(), shown)
            assert whole == text, pieces
            assert sum(p.startswith("\u2581") for p in pieces) == text.count(" "), pieces


def test_the_card_says_the_family_its_size_and_where_it_came_from(case):
    card = (case.root / "ckpt" / "card.md").read_text()
    family = {"bart": "BART", "mbart": "mBART", "m2m100": "M2M100", "nllb": "NLLB"}[case.name]
    assert f"imported from a Hugging Face {family}" in card
    size = f"size: {case.bundle.model.n_parameters():,} parameters, saved as float32; 2+2 layers, d_model 32"
    assert size in card
    assert f"`{case.folder.resolve()}`" in card and "python -m core import-hf" in card
    assert f"then always {case.bundle.config.forced_bos_id} (`{FORCED[case.name]}`)" in card
    assert case.bundle.info["imported_from"]["family"] == case.name


def test_greedy_ids_and_every_heads_attention_match_transformers(case):
    cfg = case.bundle.config
    outputs = set()
    for text in TEXTS:
        out = case.bundle.translate(text, max_len=MAX_NEW)
        ours = [int(i) for i in out.trace["output.ids"]]
        assert ours == generate(case, text), text
        assert ours[0] == cfg.forced_bos_id  # the forced first output
        assert cfg.pad_id not in ours  # (transformers gives a generated <pad> position 0 in M2M100: not compared)
        outputs.add(tuple(ours))
        src = torch.tensor([case.tok(text).input_ids])
        with torch.inference_mode():
            theirs = case.model(
                input_ids=src, decoder_input_ids=torch.tensor([[cfg.bos_id] + ours[:-1]]), output_attentions=True
            )
            logits = case.bundle.model(src, torch.tensor([[cfg.bos_id] + ours[:-1]]))
        np.testing.assert_allclose(logits.numpy(), theirs.logits.numpy(), atol=1e-4, rtol=0)
        for kind, arrays in (
            ("encoder", theirs.encoder_attentions),
            ("decoder", theirs.decoder_attentions),
            ("cross", theirs.cross_attentions),
        ):
            assert out.trace.n_layers[kind] == len(arrays) == 2
            for layer, array in enumerate(arrays):
                np.testing.assert_allclose(out.trace.attention(kind, layer), array[0].numpy(), atol=1e-4, rtol=0)
    assert len(outputs) == len(TEXTS)  # the outputs depend on the input


def test_beam_search_matches_transformers_where_hypotheses_end_early(case, tmp_path):
    """eos made likely (``hf_beam.make_eos_likely``) in a copy of the folder: beam-4 ids equal
    ``generate(num_beams=4)``'s under early_stopping False, True and "never" (length penalties 1, 2, 0.5:
    ``hf_beam.SETTINGS``), with hypotheses ending before the search does."""
    from transformers import AutoModelForSeq2SeqLM

    folder = shutil.copytree(case.folder, tmp_path / "hf")
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    texts = TEXTS + ENGLISH[5:7]
    make_eos_likely(
        model,
        [case.tok([t], return_tensors="pt") for t in texts],
        case.bundle.config.eos_id,
        gap=EOS_GAP[case.name],
        rounds=3,
    )
    model.save_pretrained(folder, safe_serialization=True)
    beams = SimpleNamespace(model=AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), tok=case.tok)

    def theirs(text: str, length_penalty: float, early_stopping: bool | str) -> list[int]:
        return generate(beams, text, BEAMS, length_penalty=length_penalty, early_stopping=early_stopping)

    def imported(out: Path) -> core.Bundle:
        assert main(["import-hf", str(folder), "--out", str(out)]) == 0
        return core.load(out, device="cpu")

    compare_beams(folder, imported, theirs, texts, tmp_path)


def test_the_languages_are_chosen_at_import_and_a_code_the_tokenizer_lacks_is_refused(case):
    info = case.bundle.info
    if case.name == "bart":  # no language codes: the names are labels, the framing is <s> x </s>
        assert (info["source_language"], info["target_language"]) == ("src", "tgt")
        return
    assert (info["source_language"], info["target_language"]) == {
        "mbart": ("en_XX", "de_DE"),
        "m2m100": ("en", "de"),
        "nllb": ("eng_Latn", "deu_Latn"),
    }[case.name]
    other = {"mbart": "fr_XX", "m2m100": "fr", "nllb": "fra_Latn"}[case.name]
    path = hf_families.convert(case.folder, case.root / "fr", languages=(None, other))
    french = core.load(path, device="cpu")
    assert french.tokenizer.piece(french.config.forced_bos_id) == {"m2m100": "__fr__"}.get(case.name, other)
    assert french.translate(TEXTS[0], max_len=3).trace["output.ids"][0] == french.config.forced_bos_id
    with pytest.raises(InputError, match=r"--target-language 'xx_YY': not a language code .* it has: .*" + other):
        hf_families.convert(case.folder, case.root / "bad", languages=(None, "xx_YY"))
    assert not (case.root / "bad").exists()


def test_a_family_the_lab_does_not_open_is_named(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "pegasus"}')
    with pytest.raises(CheckpointError, match="Pegasus .* The lab opens: .*BART.*M2M100"):
        hf_families.convert(tmp_path, tmp_path / "out")


def test_export_hf_round_trips_each_family(case):
    """export-hf writes the family's folder; transformers loads it; re-importing it gives the same tokens."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    assert main(["export-hf", str(case.root / "ckpt"), str(case.root / "exported"), "--text", TEXTS[0]]) == 0
    again = case.root / "again"
    assert main(["import-hf", str(case.root / "exported"), "--out", str(again)]) == 0
    reimported = core.load(again, device="cpu")
    exported = SimpleNamespace(
        model=AutoModelForSeq2SeqLM.from_pretrained(case.root / "exported", attn_implementation="eager").eval(),
        tok=AutoTokenizer.from_pretrained(case.root / "exported"),
    )
    assert reimported.info["imported_from"]["family"] == case.name
    for text in TEXTS:
        ours = [int(i) for i in case.bundle.translate(text, max_len=MAX_NEW).trace["output.ids"]]
        assert [int(i) for i in reimported.translate(text, max_len=MAX_NEW).trace["output.ids"]] == ours
        assert exported.tok(text).input_ids == case.bundle.encode_source(text)[0]
        assert generate(exported, text) == ours
    assert reimported.info["target_language"] == case.bundle.info["target_language"]


def test_an_mbart_folder_that_starts_the_decoder_from_the_language_code(tmp_path):
    """mbart-large-cc25 / en-ro style: decoder_start_token_id is the target language's code, nothing is forced."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    folder = build_mbart_folder(tmp_path / "hf", start_from_language=True)
    bundle = core.load(hf_families.convert(folder, tmp_path / "ckpt"), device="cpu")
    assert bundle.tokenizer.piece(bundle.config.bos_id) == "de_DE" and bundle.config.forced_bos_id is None
    case = SimpleNamespace(
        model=AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval(),
        tok=AutoTokenizer.from_pretrained(folder),
    )
    for text in TEXTS[:2]:
        assert bundle.encode_source(text)[0] == case.tok(text).input_ids
        assert [int(i) for i in bundle.translate(text, max_len=MAX_NEW).trace["output.ids"]] == generate(case, text)


def test_an_nllb_folder_with_legacy_behaviour_puts_the_language_code_after_eos(tmp_path):
    from transformers import AutoTokenizer

    folder = build_m2m100_folder(tmp_path / "hf", nllb=True, legacy=True)
    bundle = core.load(hf_families.convert(folder, tmp_path / "ckpt"), device="cpu")
    tok = AutoTokenizer.from_pretrained(folder)
    for text in TEXTS[:2]:
        ids = bundle.encode_source(text)[0]
        assert ids == tok(text).input_ids and bundle.tokenizer.pieces(ids[-2:]) == ["</s>", "eng_Latn"]


def test_bad_folders_are_refused_by_file_and_field(tmp_path):
    folder = build_mbart_folder(tmp_path / "hf")
    (folder / "tokenizer.json").rename(tmp_path / "tokenizer.json")
    with pytest.raises(
        CheckpointError, match=r"tokenizer\.json: missing — a mbart folder's tokenizer is tokenizer\.json"
    ):
        hf_families.convert(folder, tmp_path / "out")
    (folder / "tokenizer.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"tokenizer\.json: not a readable tokenizer\.json"):
        hf_families.convert(folder, tmp_path / "out")
    (tmp_path / "tokenizer.json").replace(folder / "tokenizer.json")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "activation_function": "mish"}))
    with pytest.raises(CheckpointError, match="config.json: field activation_function is 'mish'; supported"):
        hf_families.convert(folder, tmp_path / "out")
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": 40, "d_model": 32}))
    with pytest.raises(
        CheckpointError, match=r"the shared embedding has shape \(\d+, 32\), config.json implies \(40, 32\)"
    ):
        hf_families.convert(folder, tmp_path / "out")
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["MBartForCausalLM"]}))
    with pytest.raises(CheckpointError, match="only MBartForConditionalGeneration"):
        hf_families.convert(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_export_hf_names_what_does_not_fit_the_family(tmp_path, capsys):
    """A checkpoint of M2M100's positions whose tokenizer is a plain SentencePiece model and whose <pad> keeps its
    position is not an M2M100 / NLLB folder: export-hf says both, and writes nothing."""
    checkpoint = build_tiny_checkpoint(
        tmp_path / "ckpt", pe_layout="concatenated", position_offset=2, norm="pre", pad_position_zero=False
    )
    assert main(["export-hf", str(checkpoint), str(tmp_path / "out")]) == 2
    said = capsys.readouterr().err
    assert "does not fit transformers' BART / mBART / M2M100" in said
    assert "tokenizer: a nllb folder's tokenizer is a tokenizer.json" in said
    assert "pad_position_zero False: transformers' nllb gives <pad> a zero position" in said
    assert not (tmp_path / "out").exists()


def test_learned_position_tables_bound_the_source_and_the_output(case):
    """BART's and mBART's tables have 64 rows here: a longer source is refused (or cut with truncate=True), a larger
    max_len is refused, and the default output length stops at 64; sinusoids (M2M100, NLLB) have no such bound."""
    long = " ".join(ENGLISH[:8])
    assert 64 < len(case.bundle.tokenizer.encode(long)) < 250  # beyond the table, within the bundle's own limit
    framing = len(case.bundle.tokenizer.frame_source([], case.bundle.config.eos_id))
    if case.bundle.config.positional != "learned":
        assert len(case.bundle.translate(long, max_len=100).trace["output.ids"]) == 100
        return
    with pytest.raises(InputError, match=rf"tokens long; the limit is {64 - framing}"):
        case.bundle.translate(long)
    with pytest.raises(InputError, match="max_len must be a whole number from 1 to 64"):
        case.bundle.translate(TEXTS[0], max_len=65)
    out = case.bundle.translate(long, truncate=True)  # default max_len 2 * 64 + 10, capped by the table
    assert len(out.trace["ids.src"]) == 64 and len(out.trace["output.ids"]) <= 64
