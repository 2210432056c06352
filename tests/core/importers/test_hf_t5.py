"""Hugging Face T5 / Flan-T5 / mT5 folder -> core checkpoint (``python -m core import-hf``), checked against
transformers itself on folders built here (``tests/hf_folders.py``: random weights, spiece.model trained on the
fixture corpus): source ids equal the folder's own tokenizer's (task prefix included), greedy and beam-4 ids equal
``generate``'s, logits (1e-4) and every layer's encoder, decoder and cross-attention equal ``output_attentions``
(1e-4), for v1.0 (ReLU, tied head rescaled by d_model**-0.5), v1.1 (gated GELU, a head of its own) and mT5; every bad
folder refused with a CheckpointError naming the file and field.

Beam search: an imported folder decodes with transformers' beam policy (``ModelConfig.beam``,
``core.decoding.beam_finish``);
the beam test makes eos likely so that hypotheses end early and compares several length penalties and early_stopping
values (``tests/hf_beam.py``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hf_beam import BEAMS, compare_beams, make_eos_likely
from hf_beam import MAX_NEW as BEAM_MAX_NEW
from hf_folders import (
    ENGLISH,
    PREFIX,
    build_t5_folder,
    save_t5_folder,
)
from safetensors.torch import load_file, save_file

import core
from core import CheckpointError
from core.cli import main
from core.importers import hf_families

transformers = pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")

MAX_NEW = 12
TEXTS = [ENGLISH[1], ENGLISH[4], "The dog sleeps near the window, I think.", ENGLISH[6]]
EOS = 1


def hf_generate(model, tok, text: str, num_beams: int = 1, max_new_tokens: int = MAX_NEW) -> list[int]:
    with torch.inference_mode():
        out = model.generate(
            **tok([PREFIX + text], return_tensors="pt"),
            num_beams=num_beams,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            length_penalty=1.0,
            early_stopping=False,
        )
    return out[0, 1:].tolist()


def reach_eos(model, tok) -> None:
    """Point the (untied) head's eos row at one text's decoder state at step 3, so that greedy decoding of that
    text ends with eos there or earlier (random weights almost never produce it): the tests cover stopping too."""
    text = TEXTS[1]
    out = hf_generate(model, tok, text)
    seen: list[torch.Tensor] = []
    hook = model.lm_head.register_forward_hook(lambda _m, args, _out: seen.append(args[0]))
    with torch.no_grad():
        logits = model(
            **tok([PREFIX + text], return_tensors="pt"), decoder_input_ids=torch.tensor([[0] + out[:3]])
        ).logits
        hook.remove()
        h = seen[-1][0, 3]  # (D,) what the head reads at step 3
        model.lm_head.weight[EOS] = h * (float(logits[0, 3].max()) + 2.0) / h.dot(h)


def imported(root: Path, folder: Path, **cli: str) -> core.Bundle:
    args = [f"--{k.replace('_', '-')}={v}" for k, v in cli.items()]
    assert main(["import-hf", str(folder), "--out", str(root / "ckpt"), *args]) == 0
    return core.load(root / "ckpt", device="cpu")


@pytest.fixture(scope="module", params=["1.0", "1.1", "mt5"])
def case(request, tmp_path_factory):
    """A T5 folder, transformers' model and tokenizer on it, and the checkpoint import-hf made of it."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    root = tmp_path_factory.mktemp(f"t5-{request.param}")
    version = "1.0" if request.param == "1.0" else "1.1"
    folder = build_t5_folder(root / "hf", version, seed=2, model_type="mt5" if request.param == "mt5" else "t5")
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    if version == "1.1":
        reach_eos(model, tok)
        save_t5_folder(model, folder / "spiece.model", folder)
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    bundle = imported(root, folder)
    return SimpleNamespace(name=request.param, folder=folder, model=model, tok=tok, bundle=bundle)


def test_the_tokenizer_reads_the_folder_as_transformers_does(case):
    tokenizer = case.bundle.tokenizer
    assert tokenizer.source_prefix == PREFIX  # config.json's first translation task
    for text in TEXTS + ["Ein Wort mit ☃ darin.", "Fill <extra_id_0> and <extra_id_3> in."]:
        ids = case.bundle.encode_source(text)[0]
        assert ids == case.tok(PREFIX + text).input_ids, text
        assert tokenizer.pieces(ids) == case.tok.convert_ids_to_tokens(ids)
    assert tokenizer.vocab_size == len(case.tok)
    target = case.tok(text_target="Die Katze schläft.").input_ids
    assert tokenizer.encode_target("Die Katze schläft.") + [EOS] == target  # no prefix on the target side
    assert tokenizer.decode(target) == case.tok.decode(target, skip_special_tokens=True)


def test_greedy_logits_and_every_head_match_transformers(case):
    cfg, stopped = case.bundle.config, 0
    for text in TEXTS:
        out = case.bundle.translate(text, max_len=MAX_NEW)
        ours = [int(i) for i in out.trace["output.ids"]]
        assert ours == hf_generate(case.model, case.tok, text), text
        stopped += ours[-1] == cfg.eos_id
        src = torch.tensor([case.tok(PREFIX + text).input_ids])
        tgt = torch.tensor([[cfg.bos_id] + ours[:-1]])
        with torch.inference_mode():
            theirs = case.model(input_ids=src, decoder_input_ids=tgt, output_attentions=True)
            logits = case.bundle.model(src, tgt)
        np.testing.assert_allclose(logits.numpy(), theirs.logits.numpy(), atol=1e-4, rtol=1e-5)
        for kind, arrays in (
            ("encoder", theirs.encoder_attentions),
            ("decoder", theirs.decoder_attentions),
            ("cross", theirs.cross_attentions),
        ):
            assert out.trace.n_layers[kind] == len(arrays) == 2
            for layer, array in enumerate(arrays):
                np.testing.assert_allclose(out.trace.attention(kind, layer), array[0].numpy(), atol=1e-4, rtol=0)
    assert len({tuple(case.bundle.translate(t, max_len=4).trace["output.ids"]) for t in TEXTS}) > 1  # input matters
    assert stopped >= (1 if case.name != "1.0" else 0), stopped


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_beam_search_matches_transformers_where_hypotheses_end_early(version, tmp_path):
    """eos made likely (``hf_beam.make_eos_likely``): beam-4 ids equal ``generate(num_beams=4)``'s under
    early_stopping False, True and "never" (length penalties 1, 2, 0.5: ``hf_beam.SETTINGS``), with hypotheses ending
    before the search does."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    folder = build_t5_folder(tmp_path / "hf", version, seed=2)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    texts = TEXTS + [ENGLISH[8], ENGLISH[10]]
    make_eos_likely(model, [tok([PREFIX + t], return_tensors="pt") for t in texts], EOS, gap=2.0)
    save_t5_folder(model, folder / "spiece.model", folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()

    def generate(text: str, length_penalty: float, early_stopping: bool | str) -> list[int]:
        with torch.inference_mode():
            out = model.generate(
                **tok([PREFIX + text], return_tensors="pt"),
                num_beams=BEAMS,
                do_sample=False,
                max_new_tokens=BEAM_MAX_NEW,
                length_penalty=length_penalty,
                early_stopping=early_stopping,
            )
        return out[0, 1:].tolist()

    compare_beams(folder, lambda out: imported(out, folder), generate, texts, tmp_path)


def test_the_card_and_config_say_which_family_its_size_and_where_it_came_from(case):
    info = case.bundle.info
    assert info["imported_from"]["format"] == "huggingface-t5"
    assert info["imported_from"]["family"] == ("mt5" if case.name == "mt5" else "t5")
    assert info["imported_from"]["folder"] == str(case.folder.resolve())
    assert (info["source_language"], info["target_language"]) == ("en", "de")
    card = (case.bundle.path / "card.md").read_text()
    cfg = case.bundle.config
    assert f"{cfg.n_encoder_layers}+{cfg.n_decoder_layers} layers, d_model 32, 4 heads of d_kv 12" in card
    assert f"{case.bundle.model.n_parameters():,} parameters" in card
    assert str(case.folder.resolve()) in card and repr(PREFIX) in card
    family = {"1.0": "T5 v1.0-shaped", "1.1": "T5 v1.1-shaped", "mt5": "mT5"}[case.name]
    assert family in card
    assert ("scaled by d_model^-0.5" in card) == (case.name == "1.0")


def test_the_languages_pick_the_task_prefix_or_it_is_given(case, tmp_path, capsys):
    bundle = imported(tmp_path, case.folder, source_language="en", target_language="fr")
    assert bundle.tokenizer.source_prefix == "translate English to French: "
    assert bundle.encode_source("Hi.")[0] == case.tok("translate English to French: Hi.").input_ids
    given = imported(tmp_path / "given", case.folder, source_prefix="Translate to German: ")
    assert given.tokenizer.source_prefix == "Translate to German: " and given.languages == ("src", "tgt")
    args = ["--source-language", "en", "--target-language", "ja"]
    assert main(["import-hf", str(case.folder), "--out", str(tmp_path / "ja"), *args]) == 2
    assert "no task matches translation_en_to_ja (it has translation_en_to_de" in capsys.readouterr().err
    only_target = imported(tmp_path / "fr", case.folder, target_language="fr")  # one side is enough when one matches
    assert only_target.tokenizer.source_prefix == "translate English to French: " and only_target.languages == (
        "en",
        "fr",
    )
    assert main(["import-hf", str(case.folder), "--out", str(tmp_path / "en"), "--source-language", "en"]) == 2
    assert "2 tasks match translation_en_to_* (it has translation_en_to_de" in capsys.readouterr().err


@pytest.fixture(scope="module")
def v11_folder(tmp_path_factory) -> Path:
    """One good folder the refusal tests damage copies of (the refusals are the same for every version)."""
    return build_t5_folder(tmp_path_factory.mktemp("refusals") / "hf", "1.1")


def _copy(folder: Path, tmp_path: Path) -> Path:
    out = tmp_path / "bad"
    shutil.copytree(folder, out)
    return out


def _edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: _edit_config(f, model_type="whisper"), "model_type 'whisper' — a speech-recognition model"),
        (lambda f: _edit_config(f, model_type="umt5"), "UMT5 .* The lab opens: Marian .*T5"),
        (lambda f: _edit_config(f, model_type="my-model"), "not a model family this lab opens"),
        (lambda f: _edit_config(f, feed_forward_proj="gated-tanhh"), "field feed_forward_proj is 'gated-tanhh'"),
        (lambda f: _edit_config(f, architectures=["T5EncoderModel"]), "only T5ForConditionalGeneration"),
        (lambda f: _edit_config(f, num_layers=3), "tensor encoder.block.2.layer.0.* is missing .*3\\+2 layers"),
        (lambda f: _edit_config(f, d_kv=7), "has shape .* implies"),
        (lambda f: _edit_config(f, d_model=True), "field d_model must be a whole number"),
        (
            lambda f: (f / "spiece.model").unlink(),
            r"bad: has no tokenizer — a T5 folder holds tokenizer.json .* or spiece.model",
        ),
        (lambda f: (f / "spiece.model").write_text("not a model"), "not a readable SentencePiece model"),
        (lambda f: (f / "model.safetensors").rename(f / "pytorch_model.bin"), "refused — it is a Python pickle"),
    ],
    ids=[
        "whisper",
        "umt5",
        "unknown",
        "activation",
        "encoder-only",
        "layers",
        "d_kv",
        "bool",
        "no-tokenizer",
        "bad-spiece",
        "pickle",
    ],
)
def test_bad_folders_are_refused_by_file_and_field(v11_folder, tmp_path, damage, message):
    folder = _copy(v11_folder, tmp_path)
    damage(folder)
    with pytest.raises(CheckpointError, match=message):
        hf_families.convert(folder, tmp_path / "ckpt")
    assert not (tmp_path / "ckpt").exists()


def test_an_unknown_tensor_is_refused(v11_folder, tmp_path):
    folder = _copy(v11_folder, tmp_path)
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["encoder.block.0.layer.0.SelfAttention.extra.weight"] = torch.zeros(2, 2)
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match="does not have: \\['encoder.block.0.layer.0.SelfAttention.extra"):
        hf_families.convert(folder, tmp_path / "ckpt")


def test_a_config_written_before_scale_decoder_outputs_reads_the_rescale_from_the_tying(case, tmp_path):
    """Folders saved by transformers 4 (t5-small, flan-t5-*) have no scale_decoder_outputs: the rescale follows
    tie_word_embeddings, as transformers 5.23 reads them; the logits agree either way."""
    from transformers import AutoModelForSeq2SeqLM

    folder = _copy(case.folder, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    assert config.pop("scale_decoder_outputs", None) is not None or case.name == "mt5"
    (folder / "config.json").write_text(json.dumps(config))
    bundle = imported(tmp_path, folder)
    assert bundle.config.scale_decoder_output == (case.name == "1.0")
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    src = torch.tensor([case.tok(PREFIX + TEXTS[0]).input_ids])
    tgt = torch.tensor([[0, 5, 9, 14]])
    with torch.inference_mode():
        np.testing.assert_allclose(
            bundle.model(src, tgt).numpy(), model(input_ids=src, decoder_input_ids=tgt).logits.numpy(), atol=1e-4
        )
