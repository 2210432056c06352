"""Folders as the outside world writes them (``tests/hf_wild_folders.py``: transformers 5's own classes and
``save_pretrained``, tokenizers from transformers' own test fixtures) open with parity: source ids equal
``AutoTokenizer``'s on hard strings; greedy and beam-4 ids equal ``generate``'s; every attention map equals
``output_attentions`` within 1e-4; ``export-hf`` writes a folder transformers loads and that imports back to the same
tokens. Four of these folders were refused or misread before (a T5 with only tokenizer.json, mBART-50's framing, an
mBART whose target language is only its decoder's start, an M2M100 embedding without the tokenizer's made-up ids)."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hf_folders import build_t5_folder
from hf_wild_folders import HARD, WILD, build_m2m100, build_mbart, imported_case
from safetensors.torch import load_file, save_file

import core
from core import CheckpointError, InputError
from core.cli import main
from core.importers import hf_families
from core.inputs import clean_text

transformers = pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")

MAX_NEW = 8
TEXTS = ("The cat sleeps on the warm chair.", "I was born in 92000, and this is falsé.")
# where each folder's languages come from (the card and imported_from say it)
TARGET_FROM = {
    "mbart-cc25": "generation_config.json decoder_start_token_id",
    "mbart-50": "generation_config.json forced_bos_token_id",
    "m2m100": "generation_config.json forced_bos_token_id",
    "nllb": "generation_config.json forced_bos_token_id",
    "nllb-legacy": "generation_config.json forced_bos_token_id",
}


@pytest.fixture(scope="module", params=list(WILD))
def case(request, tmp_path_factory):
    """A folder built with transformers, its model and tokenizer, and the checkpoint import-hf made of it."""
    return imported_case(request.param, tmp_path_factory.mktemp(request.param), WILD[request.param])


def generate(case: SimpleNamespace, text: str, beams: int = 1) -> list[int]:
    """transformers' output ids (the decoder's start token left out), the folder's generation settings."""
    inputs = case.tok([case.prefix + text], return_tensors="pt")
    with torch.inference_mode():
        out = case.model.generate(**inputs, num_beams=beams, do_sample=False, max_new_tokens=MAX_NEW)
    return out[0, 1:].tolist()


def test_the_folders_files_are_transformers_own(case):
    """Only what save_pretrained wrote: T5s have tokenizer.json and no spiece.model (transformers 5)."""
    files = {p.name for p in case.folder.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer_config.json"} <= files
    if case.name.startswith(("t5", "mt5")):
        assert "tokenizer.json" in files and "spiece.model" not in files


def test_source_ids_equal_autotokenizers_on_hard_strings(case):
    tokenizer, eos = case.bundle.tokenizer, case.bundle.config.eos_id
    for text in HARD:  # the reader itself, on the raw text
        assert tokenizer.frame_source(tokenizer.encode(text), eos) == case.tok(case.prefix + text).input_ids, text
    framing = len(tokenizer.frame_source([], eos))
    for text in HARD:  # what the lab feeds the model: the text with its whitespace tidied (core.inputs.clean_text)
        theirs = case.tok(case.prefix + clean_text(text)).input_ids
        if len(theirs) == framing:  # the fixture's 21-piece BART vocabulary has no piece for most characters
            with pytest.raises(InputError, match="Nothing translatable is left"):
                case.bundle.encode_source(text)
        else:
            assert case.bundle.encode_source(text)[0] == theirs, text
    with pytest.raises(InputError, match="The text is empty"):
        case.bundle.encode_source(" \t ")


def test_greedy_ids_and_every_attention_map_match_transformers(case):
    cfg = case.bundle.config
    for text in TEXTS:
        out = case.bundle.translate(text, max_len=MAX_NEW)
        ours = [int(i) for i in out.trace["output.ids"]]
        assert ours == generate(case, text), text
        src = torch.tensor([[int(i) for i in out.trace["ids.src"]]])
        decoder_in = torch.tensor([[cfg.bos_id] + ours[:-1]])
        with torch.inference_mode():
            theirs = case.model(input_ids=src, decoder_input_ids=decoder_in, output_attentions=True)
        stacks = {"encoder": theirs.encoder_attentions, "decoder": theirs.decoder_attentions}
        stacks["cross"] = theirs.cross_attentions
        for kind, arrays in stacks.items():
            assert out.trace.n_layers[kind] == len(arrays)
            for layer, array in enumerate(arrays):
                np.testing.assert_allclose(out.trace.attention(kind, layer), array[0].numpy(), atol=1e-4, rtol=0)


def test_beam_4_ids_match_generate(case):
    for text in TEXTS:
        ours = case.bundle.translate(text, beam_size=4, max_len=MAX_NEW)
        assert [int(i) for i in ours.trace["output.ids"]] == generate(case, text, beams=4), text


def test_export_hf_writes_a_folder_transformers_loads_and_that_imports_back(case):
    from transformers import AutoTokenizer

    exported = case.root / "exported"
    assert main(["export-hf", str(case.root / "ckpt"), str(exported), "--text", TEXTS[0]]) == 0
    assert main(["import-hf", str(exported), "--out", str(case.root / "again")]) == 0
    again = core.load(case.root / "again", device="cpu")
    tok = AutoTokenizer.from_pretrained(exported)
    for text in TEXTS:
        assert tok(case.prefix + text).input_ids == case.bundle.encode_source(text)[0]
        first = case.bundle.translate(text, max_len=MAX_NEW).trace["output.ids"]
        assert [int(i) for i in again.translate(text, max_len=MAX_NEW).trace["output.ids"]] == [int(i) for i in first]


def test_the_languages_are_the_folders_and_the_card_says_where_they_came_from(case):
    origin = case.bundle.info["imported_from"]
    card = (case.root / "ckpt" / "card.md").read_text()
    if case.name in TARGET_FROM:
        assert origin["target_language_from"] == TARGET_FROM[case.name]
        assert origin["source_language_from"] == "tokenizer_config.json src_lang"
        assert f"the target language from {TARGET_FROM[case.name]})" in " ".join(card.split())
        forced_or_start = case.bundle.config.forced_bos_id
        if forced_or_start is None:  # mBART-cc25 / en-ro: the decoder starts from the language
            forced_or_start = case.bundle.config.bos_id
        assert case.bundle.tokenizer.piece(forced_or_start) in ("ro_RO", "__pt__", "por_Latn")
    else:  # T5, BART and Marian name no language by a token: nothing is said to come from a field
        assert "source_language_from" not in origin and "target_language_from" not in origin
        assert "language from" not in card


def test_mbart_50_reads_its_language_code_first_and_cc25_after_the_text(case):
    """The two mBART tokenizers frame a source differently (MBart50Tokenizer / MBartTokenizer), as do NLLB's two
    behaviours; the lab reads which from the folder."""
    pieces = case.bundle.tokenizer.pieces(case.bundle.encode_source("The cat sleeps.")[0])
    first = {"mbart-50": "en_XX", "nllb": "eng_Latn", "m2m100": "__en__"}
    last = {"mbart-cc25": "en_XX", "nllb-legacy": "eng_Latn"}
    if case.name in first:
        assert pieces[0] == first[case.name] and pieces[-1] == "</s>"
    if case.name in last:
        assert pieces[-2:] == ["</s>", last[case.name]]


def test_an_embedding_without_the_made_up_ids_opens_and_one_without_a_texts_id_is_refused(tmp_path):
    """M2M100Tokenizer numbers 8 unnamed ids after its language codes; transformers' generate needs no row for
    them, so neither does the lab. An embedding that lacks a row for an id text gives is refused, naming it."""
    folder = build_m2m100(tmp_path / "m2m")
    assert main(["import-hf", str(folder), "--out", str(tmp_path / "ckpt")]) == 0
    bundle = core.load(tmp_path / "ckpt", device="cpu")
    assert bundle.config.src_vocab_size < bundle.tokenizer.vocab_size  # the made-up ids have no row
    config = json.loads((folder / "config.json").read_text())
    rows = config["vocab_size"]  # vocab.json's ids, then the 100 language codes
    for n, (short, said) in enumerate(
        (
            (rows - 110, rf"the tokenizer can give id {rows - 110} "),  # fewer rows than vocab.json's ids
            (rows - 100, r"the tokenizer uses id \d+ \('__(en|pt)__'\)"),  # vocab.json's ids, no language code
        )
    ):
        smaller = tmp_path / f"smaller{n}"
        shutil.copytree(folder, smaller)
        weights = load_file(folder / "model.safetensors")
        tensors = {k: v[:short] if v.shape[0] == rows else v for k, v in weights.items()}
        save_file(tensors, smaller / "model.safetensors", metadata={"format": "pt"})
        (smaller / "config.json").write_text(json.dumps({**config, "vocab_size": short}))
        with pytest.raises(CheckpointError, match=rf"the model has {short} embedding rows, but {said}"):
            hf_families.convert(smaller, tmp_path / f"refused{n}")


def test_a_typed_token_without_an_embedding_row_is_refused_by_name(tmp_path):
    """mBART-50's <mask> is its last id; a model without that row opens (transformers' generate runs it), and a
    text that names <mask> is refused before the model would read a row it does not have."""
    folder = build_mbart(tmp_path / "mb", fifty=True, missing_rows=1)
    assert main(["import-hf", str(folder), "--out", str(tmp_path / "ckpt")]) == 0
    bundle = core.load(tmp_path / "ckpt", device="cpu")
    assert bundle.translate("The cat sleeps.", max_len=3).text is not None
    with pytest.raises(InputError, match=r"The text contains '<mask>', a token of this tokenizer .* no embedding"):
        bundle.encode_source("The <mask> sleeps.")
    with pytest.raises(InputError, match=r"The text contains '<mask>'"):  # a reference translation: the same
        bundle.teacher_forced("The cat sleeps.", "The <mask> sleeps.")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_folder_stays_half_unless_asked(tmp_path, dtype):
    """The checkpoint keeps the folder's dtype (half the disk of float32); --dtype float32 asks for float32; the
    tokens are the same either way (the engine computes in float32)."""
    from transformers import AutoModelForSeq2SeqLM

    folder = WILD["mbart-50"](tmp_path / "hf")
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).to(dtype)
    model.save_pretrained(folder)
    assert main(["import-hf", str(folder), "--out", str(tmp_path / "kept")]) == 0
    assert main(["import-hf", str(folder), "--out", str(tmp_path / "wide"), "--dtype", "float32"]) == 0
    kept, wide = core.load(tmp_path / "kept", device="cpu"), core.load(tmp_path / "wide", device="cpu")
    assert kept.info["dtype"] == str(dtype).removeprefix("torch.") and wide.info["dtype"] == "float32"
    assert {t.dtype for t in load_file(tmp_path / "kept" / "model.safetensors").values()} == {dtype}
    assert (tmp_path / "kept" / "model.safetensors").stat().st_size < 0.6 * (
        tmp_path / "wide" / "model.safetensors"
    ).stat().st_size
    for text in TEXTS:
        same = [
            kept.translate(text, max_len=MAX_NEW).trace["output.ids"],
            wide.translate(text, max_len=MAX_NEW).trace["output.ids"],
        ]
        assert [int(i) for i in same[0]] == [int(i) for i in same[1]]


def test_a_hub_cache_folder_opens_at_its_model_folder_or_its_snapshot(tmp_path, monkeypatch):
    """~/.cache/huggingface/hub/models--ORG--NAME holds refs/main and snapshots/<hash>/: either path opens; a model
    folder with two snapshots and no ref is refused, naming both."""
    model_folder = tmp_path / "hub" / "models--someone--tiny-mbart-50"
    hashes = ("0123abc", "4567def")
    for commit in hashes:
        WILD["mbart-50"](model_folder / "snapshots" / commit)
    with pytest.raises(CheckpointError, match=rf"holds 2 snapshots and refs/main names none of them.*{hashes[1]}"):
        hf_families.family(model_folder)
    (model_folder / "refs").mkdir()
    (model_folder / "refs" / "main").write_text(hashes[1])
    for n, path in enumerate((model_folder, model_folder / "snapshots" / hashes[0])):
        assert main(["import-hf", str(path), "--out", str(tmp_path / f"ckpt{n}")]) == 0
    assert core.load(tmp_path / "ckpt0").info["imported_from"]["folder"].endswith(hashes[1])
    assert core.load(tmp_path / "ckpt1").info["imported_from"]["folder"].endswith(hashes[0])
    # without --out, the checkpoint is named after the model, not the snapshot's hash
    for path in (model_folder, model_folder / "snapshots" / hashes[0]):
        assert hf_families.checkpoint_name(path) == "tiny-mbart-50"
    monkeypatch.chdir(tmp_path)
    assert main(["import-hf", str(model_folder)]) == 0
    assert (tmp_path / "checkpoints" / "tiny-mbart-50" / "config.json").is_file()


def test_an_fsmt_folder_is_refused_by_name_with_the_reason(tmp_path, capsys):
    """fairseq's WMT19 models in transformers' format (FSMT): its Moses pre-tokenisation is what the lab cannot
    reproduce; the refusal says so, and what to use instead."""
    from transformers import FSMTConfig, FSMTForConditionalGeneration

    config = FSMTConfig(
        langs=["en", "de"],
        src_vocab_size=40,
        tgt_vocab_size=40,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=32,
    )
    FSMTForConditionalGeneration(config).save_pretrained(tmp_path / "fsmt")
    assert main(["import-hf", str(tmp_path / "fsmt"), "--out", str(tmp_path / "ckpt")]) == 2
    said = capsys.readouterr().err
    assert "model_type 'fsmt' — a FairSeq machine-translation model" in said and "sacremoses" in said
    assert not (tmp_path / "ckpt").exists()


def test_a_t5_folder_in_transformers_4s_layout_reads_as_transformers_5_reads_it(tmp_path):
    """spiece.model, a tokenizer_config.json that names no special token and a special_tokens_map.json that does
    (an AddedToken written out, sentinels listed): the specials come from the map, and the sentinels number
    ``extra_ids`` (100 when unnamed) whatever the map lists, as AutoTokenizer of transformers 5 reads it. Sentinels
    beyond the embedding open (no text gives them); typed, one is refused by name."""
    from transformers import AutoTokenizer

    folder = build_t5_folder(tmp_path / "hf")  # 8 sentinels and 3 spare rows
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "T5Tokenizer"}))
    specials = {"eos_token": {"content": "</s>", "lstrip": False}, "unk_token": "<unk>", "pad_token": "<pad>"}
    listed = [f"<extra_id_{i}>" for i in range(8)]
    (folder / "special_tokens_map.json").write_text(json.dumps({**specials, "additional_special_tokens": listed}))
    assert main(["import-hf", str(folder), "--out", str(tmp_path / "ckpt")]) == 0
    bundle, tok = core.load(tmp_path / "ckpt", device="cpu"), AutoTokenizer.from_pretrained(folder)
    assert bundle.tokenizer.vocab_size == len(tok) > bundle.config.src_vocab_size
    tokenizer, prefix = bundle.tokenizer, bundle.tokenizer.source_prefix
    for text in (*HARD, "a <extra_id_3> b"):
        assert tokenizer.frame_source(tokenizer.encode(text), bundle.config.eos_id) == tok(prefix + text).input_ids
    with pytest.raises(InputError, match=r"The text contains '<extra_id_3>', a token of this tokenizer"):
        bundle.encode_source("a <extra_id_3> b")
