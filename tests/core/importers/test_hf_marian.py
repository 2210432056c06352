"""Hugging Face Marian folder -> core checkpoint (``python -m core import-hf``), checked against transformers itself
on folders built here (random MarianMTModel weights, SentencePiece models trained on the fixture corpus):
tokenizer ids and text, greedy and beam ids of ``generate``, logits (1e-4) and every head's attention in eager mode
(1e-5), for several configurations; and every bad input refused with a CheckpointError naming the file and field.

Beam search: an imported folder decodes with transformers' beam policy (``ModelConfig.beam``,
``core.decoding.beam_finish``;
a Bergamot / Marian C++ import keeps the lab's: the beam_size best extensions a step, those ending finished);
the beam test makes eos likely so that hypotheses end early and compares several length penalties and early_stopping
values (``tests/hf_beam.py``). Banned ids (``<pad>``) are taken out after the softmax in both, so the other ids keep
the model's probabilities and the beam scores agree.
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
from marian_folders import ENGLISH, generation, marian_model, save_folder, write_tokenizer
from safetensors.torch import load_file, save_file

import core
from core import CheckpointError
from core.cli import main
from core.importers import hf_families
from core.transformer.positional import sinusoidal_table

transformers = pytest.importorskip("transformers", reason="transformers is a test extra: pip install -e '.[test]'")
pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")

MAX_NEW = 12
TEXTS = [ENGLISH[1], ENGLISH[4], "The dog sleeps near the window, I think.", ">>nld<< Is there any tea left?"]
CASES = {  # name: (spm sizes, MarianConfig settings)
    "tiny-swish-tied": ((70, 60), dict(activation_function="swish")),
    "base-like-gelu-tied": (
        (90, 80),
        dict(
            d_model=32,
            encoder_layers=3,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            activation_function="gelu",
        ),
    ),
    "untied-relu-unscaled": (
        (60, 70),
        dict(
            activation_function="relu",
            scale_embedding=False,
            share_encoder_decoder_embeddings=False,
            tie_word_embeddings=False,
            encoder_layers=1,
        ),
    ),
}


def test_the_sinusoid_table_is_transformers_own():
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    for n, d in ((64, 16), (512, 512)):
        theirs = MarianSinusoidalPositionalEmbedding(n, d).create_weight().numpy()
        np.testing.assert_allclose(sinusoidal_table(n, d, "concatenated_hf").numpy(), theirs, atol=1e-6, rtol=0)


def hf_greedy(model, tok, vocab, text: str) -> list[int]:
    model.generation_config = generation(vocab, num_beams=1, max_new_tokens=MAX_NEW)
    with torch.inference_mode():
        return model.generate(**tok([text], return_tensors="pt"))[0, 1:].tolist()


def reach_eos(model, tok, vocab) -> None:
    """Raise eos's logit bias just enough that transformers' greedy output for one text ends with eos after a few
    tokens (random weights almost never produce it), so the parity tests cover stopping too. Raising it by b makes
    eos win at the first step whose gap (best allowed logit - eos logit) is below b, and changes nothing before."""
    pad = vocab["<pad>"]
    best: tuple[float, float] | None = None  # (gap to beat, gap at step 0) of the text whose smallest gap is latest
    for text in TEXTS:
        out = hf_greedy(model, tok, vocab, text)
        src = torch.tensor([tok(text).input_ids])
        with torch.no_grad():
            logits = model(input_ids=src, decoder_input_ids=torch.tensor([[pad] + out[:-1]])).logits[0]
        logits[:, pad] = float("-inf")
        gaps = (logits.max(-1).values - logits[:, 0]).tolist()  # (T,)
        step = int(np.argmin(gaps[: MAX_NEW - 1]))
        if 0 not in out and step >= 2 and (best is None or gaps[step] < best[0]):
            best = (gaps[step], min(gaps[:step]))
    assert best is not None, "no text's eos gap is smallest after step 1: choose other texts or seeds"
    with torch.no_grad():
        model.final_logits_bias[0, 0] += (best[0] + min(best[1], best[0] + 0.2)) / 2  # between the two gaps


@pytest.fixture(scope="module", params=list(CASES))
def case(request, tmp_path_factory):
    """A Hugging Face folder, transformers' model and tokenizer on it, and the checkpoint import-hf made of it."""
    from transformers import MarianTokenizer

    spm_sizes, settings = CASES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    folder = root / "hf"
    vocab = write_tokenizer(folder, spm_sizes)
    tok = MarianTokenizer.from_pretrained(folder)  # the files are what transformers' tokenizer reads
    if not settings.get("share_encoder_decoder_embeddings", True):
        settings = dict(settings, decoder_vocab_size=len(vocab) + 3)  # a target side with rows of its own
    model = marian_model(vocab, seed=len(request.param), pad_bias=5.0, **settings)
    reach_eos(model, tok, vocab)
    readme = "---\nlanguage: [en, de]\nlicense: cc-by-4.0\n---\n# test model\n" if "tiny" in request.param else None
    save_folder(model, folder, readme=readme)
    assert main(["import-hf", str(folder), "--out", str(root / "ckpt")]) == 0
    bundle = core.load(root / "ckpt", device="cpu")
    return SimpleNamespace(name=request.param, folder=folder, model=model, tok=tok, vocab=vocab, bundle=bundle)


def test_the_tokenizer_reads_the_folder_as_transformers_does(case):
    tokenizer = case.bundle.tokenizer
    for text in TEXTS + ["Ein Wort mit ☃ darin."]:
        assert case.bundle.encode_source(text)[0] == case.tok(text).input_ids, text
    assert tokenizer.encode(">>nld<< Is")[0] == case.vocab[">>nld<<"]  # a language code is one token
    for text in ["Die Katze schläft auf dem warmen Stuhl.", "Ist noch Tee übrig?"]:
        ids = tokenizer.encode_target(text) + [tokenizer.eos_id]
        assert ids == case.tok(text_target=text).input_ids
        assert tokenizer.decode(ids) == case.tok.decode(ids, skip_special_tokens=True, use_source_tokenizer=False)
        assert tokenizer.decode(ids) == text
    assert tokenizer.encode_target("Katze") != tokenizer.encode("Katze")  # the sides use their own models


def test_greedy_logits_and_every_head_match_transformers(case):
    cfg, stopped, banned = case.bundle.config, 0, 0
    pad = case.vocab["<pad>"]
    for text in TEXTS:
        out = case.bundle.translate(text, max_len=MAX_NEW)
        ours = [int(i) for i in out.trace["output.ids"]]
        assert ours == hf_greedy(case.model, case.tok, case.vocab, text), text
        stopped += ours[-1] == cfg.eos_id
        src = torch.tensor([case.tok(text).input_ids])
        with torch.inference_mode():
            theirs = case.model(
                input_ids=src, decoder_input_ids=torch.tensor([[pad] + ours[:-1]]), output_attentions=True
            )
            logits = case.bundle.model(src, torch.tensor([[cfg.bos_id] + ours[:-1]]))
        np.testing.assert_allclose(logits.numpy(), theirs.logits.numpy(), atol=1e-4, rtol=0)
        banned += int((theirs.logits.argmax(-1) == pad).sum())  # what an un-banned decoder would have picked
        for kind, arrays in (
            ("encoder", theirs.encoder_attentions),
            ("decoder", theirs.decoder_attentions),
            ("cross", theirs.cross_attentions),
        ):
            assert out.trace.n_layers[kind] == len(arrays)
            for layer, array in enumerate(arrays):
                np.testing.assert_allclose(out.trace.attention(kind, layer), array[0].numpy(), atol=1e-5, rtol=0)
        assert out.src_tokens == case.tok.convert_ids_to_tokens(case.tok(text).input_ids)  # the trace shows pieces
    assert stopped >= 1 and banned >= 1, (stopped, banned)  # eos ended a search; the ban on <pad> changed one


def test_beam_search_matches_transformers_where_hypotheses_end_early(tmp_path):
    """The base-like case with eos made likely (``hf_beam.make_eos_likely``): beam-4 ids equal
    ``generate(num_beams=4)``'s under early_stopping False, True and "never" (length penalties 1, 2, 0.5:
    ``hf_beam.SETTINGS``), with hypotheses ending before the search does."""
    from transformers import MarianTokenizer

    spm_sizes, settings = CASES["base-like-gelu-tied"]
    vocab = write_tokenizer(tmp_path / "hf", spm_sizes)
    tok = MarianTokenizer.from_pretrained(tmp_path / "hf")
    model = marian_model(vocab, seed=3, pad_bias=5.0, **settings)
    model.generation_config = generation(vocab, num_beams=BEAMS, max_new_tokens=BEAM_MAX_NEW)
    texts = TEXTS + [ENGLISH[5], ENGLISH[6]]
    make_eos_likely(model, [tok([t], return_tensors="pt") for t in texts], 0, gap=0.5, rounds=3)
    folder = save_folder(model, tmp_path / "hf")

    def generate(text: str, length_penalty: float, early_stopping: bool | str) -> list[int]:
        with torch.inference_mode():
            out = model.generate(
                **tok([text], return_tensors="pt"), length_penalty=length_penalty, early_stopping=early_stopping
            )
        return out[0, 1:].tolist()

    def imported(out: Path) -> core.Bundle:
        return core.load(hf_families.convert(folder, out), device="cpu")

    compare_beams(folder, imported, generate, texts, tmp_path)


def test_the_checkpoint_records_its_source_and_licence(case):
    info = case.bundle.info
    assert info["imported_from"]["format"] == "huggingface-marian"
    assert info["imported_from"]["folder"] == str(case.folder.resolve())
    card = (case.bundle.path / "card.md").read_text()
    assert str(case.folder.resolve()) in card
    if "tiny" in case.name:
        assert info["imported_from"]["licence"].startswith("cc-by-4.0") and "licence: cc-by-4.0" in card
    else:
        assert "licence: not stated in the folder" in card
    assert sorted(p.name for p in case.bundle.path.iterdir()) == [
        "card.md",
        "config.json",
        "model.safetensors",
        "source.spm",
        "target.spm",
        "vocab.json",
    ]
    assert case.bundle.path in core.list_checkpoints(case.bundle.path.parent)  # the app's picker lists it
    cfg = case.bundle.config
    assert (cfg.share_embeddings, cfg.tie_output) == ((False, False) if "untied" in case.name else (True, True))
    assert cfg.pe_layout == "concatenated_hf" and cfg.suppress_ids == (case.vocab["<pad>"],)


def test_the_command_line_translates_an_imported_checkpoint(case, capsys):
    assert main(["translate", "--checkpoint", str(case.bundle.path), "--device", "cpu", "--json", TEXTS[0]]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["src_tokens"] == case.tok.convert_ids_to_tokens(case.tok(TEXTS[0]).input_ids)


# --------------------------------------------------------------------------- bad input
@pytest.fixture(scope="module")
def good_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("good") / "hf"
    vocab = write_tokenizer(folder)
    save_folder(marian_model(vocab, seed=1), folder)
    return folder


def _edit_json(name: str, **changes):
    def edit(folder: Path) -> None:
        data = json.loads((folder / name).read_text())
        data.update(changes)
        (folder / name).write_text(json.dumps(data))

    return edit


def _edit_tensors(change):
    def edit(folder: Path) -> None:
        tensors = load_file(str(folder / "model.safetensors"))
        change(tensors)
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})

    return edit


def _pickle_only(folder: Path) -> None:
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04 not opened")


def _swap_eos(folder: Path) -> None:
    vocab = json.loads((folder / "vocab.json").read_text())
    vocab["</s>"], vocab["<unk>"] = vocab["<unk>"], vocab["</s>"]
    (folder / "vocab.json").write_text(json.dumps(vocab))


def _set(name: str, value):
    return _edit_tensors(lambda t: t.__setitem__(name, value))


ENC_FC1 = "model.encoder.layers.0.fc1.weight"
BAD = {
    "no config": (lambda f: (f / "config.json").unlink(), "config.json: missing"),
    "config not JSON": (lambda f: (f / "config.json").write_text("{"), "config.json: not valid JSON"),
    "not marian": (_edit_json("config.json", model_type="bart"), "config.json: model_type is 'bart'"),
    "causal LM": (_edit_json("config.json", architectures=["MarianForCausalLM"]), "config.json: architectures"),
    "pickle weights": (_pickle_only, "pytorch_model.bin: refused — it is a Python pickle"),
    "no weights": (lambda f: (f / "model.safetensors").unlink(), "model.safetensors: missing"),
    "truncated weights": (
        lambda f: (f / "model.safetensors").write_bytes(b"\x10\x00"),
        "model.safetensors: cannot be read",
    ),
    "no source.spm": (lambda f: (f / "source.spm").unlink(), "source.spm: missing"),
    "no vocab": (lambda f: (f / "vocab.json").unlink(), "vocab.json: missing"),
    "vocab not JSON": (lambda f: (f / "vocab.json").write_text("[1, 2"), "vocab.json: not a readable JSON"),
    "broken spm": (lambda f: (f / "target.spm").write_bytes(b"junk"), "target.spm: not a readable SentencePiece model"),
    "activation": (_edit_json("config.json", activation_function="gelu_new"), "config.json: field activation_function"),
    "pre-norm": (_edit_json("config.json", normalize_before=True), "config.json: field normalize_before"),
    "learned positions": (
        _edit_json("config.json", static_position_embeddings=False),
        "field static_position_embeddings",
    ),
    "head counts": (
        _edit_json("config.json", decoder_attention_heads=4),
        "fields encoder_attention_heads (2) and decoder_attention_heads (4)",
    ),
    "width": (_edit_json("config.json", d_model=32), "model.safetensors: the encoder embedding has shape"),
    "layers": (
        _edit_json("config.json", encoder_layers=3),
        "tensor model.encoder.layers.2.self_attn.q_proj.weight is missing",
    ),
    "bool as int": (
        _edit_json("config.json", encoder_layers=True),
        "config.json: field encoder_layers must be a whole number",
    ),
    "eos list": (
        _edit_json("config.json", eos_token_id=[0, 1]),
        "config.json: field eos_token_id must be one token id",
    ),
    "eos mismatch": (_swap_eos, "vocab.json: '</s>' has id 1 but config.json says eos_token_id 0"),
    "separate vocabs": (
        _edit_json("tokenizer_config.json", separate_vocabs=True),
        "tokenizer_config.json: field separate_vocabs",
    ),
    "sampling": (
        _edit_json("tokenizer_config.json", sp_model_kwargs={"enable_sampling": True}),
        "field sp_model_kwargs",
    ),
    "multi-token ban": (
        _edit_json("generation_config.json", bad_words_ids=[[3, 4]]),
        "generation_config.json: field bad_words_ids",
    ),
    "eos banned": (
        _edit_json("generation_config.json", bad_words_ids=[[0]]),
        "generation_config.json: field bad_words_ids / suppress_tokens bans eos (0)",
    ),
    "unknown tensor": (
        _set("model.encoder.layernorm_embedding.weight", torch.ones(16)),
        "does not have: ['model.encoder.layernorm_embedding.weight']",
    ),
    "misshapen tensor": (
        _set(ENC_FC1, torch.ones(31, 16)),
        f"tensor {ENC_FC1} has shape (31, 16), config.json implies (32, 16)",
    ),
    "missing tensor": (_edit_tensors(lambda t: t.pop(ENC_FC1)), f"tensor {ENC_FC1} is missing"),
    "integer tensor": (_set(ENC_FC1, torch.ones(32, 16, dtype=torch.int32)), f"tensor {ENC_FC1} holds torch.int32"),
    "NaN": (_set(ENC_FC1, torch.full((32, 16), float("nan"))), f"tensor {ENC_FC1} holds NaN"),
    "learned table": (
        _set("model.encoder.embed_positions.weight", torch.randn(64, 16)),
        "is neither transformers' sinusoid table nor Marian's",
    ),
    "misshapen table": (
        _set("model.encoder.embed_positions.weight", torch.randn(65, 16)),
        "tensor model.encoder.embed_positions.weight has shape (65, 16), config.json implies (64, 16)",
    ),
    "no embeddings": (
        _edit_tensors(lambda t: t.pop("model.shared.weight")),
        "tensor model.encoder.embed_tokens.weight is missing",
    ),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_folders_are_refused_by_file_and_field(good_folder, tmp_path, name):
    edit, message = BAD[name]
    folder = tmp_path / "hf"
    shutil.copytree(good_folder, folder)
    edit(folder)
    with pytest.raises(CheckpointError, match=_escape(message)):
        hf_families.convert(folder, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not any(p.name.startswith(".out") for p in tmp_path.iterdir())


def _escape(text: str) -> str:
    import re

    return re.escape(text)


def test_the_command_line_says_error_and_exits_2(good_folder, tmp_path, capsys):
    folder = tmp_path / "hf"
    shutil.copytree(good_folder, folder)
    _pickle_only(folder)
    assert main(["import-hf", str(folder), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "pytorch_model.bin" in err and "pickle" in err and "Traceback" not in err
    assert main(["import-hf", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")]) == 2
    assert "not a folder" in capsys.readouterr().err
    assert main(["import-hf", str(good_folder), "--out", str(tmp_path / "out")]) == 0
    assert main(["import-hf", str(good_folder), "--out", str(tmp_path / "out")]) == 2  # no silent replacement
    assert "already exists; pass --force" in capsys.readouterr().err
    assert main(["import-hf", str(good_folder), "--out", str(tmp_path / "out"), "--force"]) == 0


def test_a_checkpoint_tokenizer_table_must_stay_inside_its_folder(good_folder, tmp_path):
    hf_families.convert(good_folder, tmp_path / "ckpt")
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    for key, value, message in (
        ("vocab", "../hf/vocab.json", "'tokenizer.vocab' must name a file inside the checkpoint folder"),
        ("target", "/etc/passwd", "'tokenizer.target' must name a file inside the checkpoint folder"),
        ("type", "wordpiece", "has type 'wordpiece'"),
        ("eos_piece", "", "'tokenizer'.eos_piece must be a piece"),
        ("eos_piece", "<nope>", "vocab.json: the vocabulary has no eos piece '<nope>'"),
    ):
        broken = json.loads(json.dumps(config))
        broken["tokenizer"][key] = value
        (tmp_path / "ckpt" / "config.json").write_text(json.dumps(broken))
        with pytest.raises(CheckpointError, match=_escape(message)):
            core.load(tmp_path / "ckpt", device="cpu")
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))
    (tmp_path / "ckpt" / "target.spm").unlink()
    with pytest.raises(CheckpointError, match="target.spm: missing"):
        core.load(tmp_path / "ckpt", device="cpu")


def test_the_licence_is_found_where_a_folder_states_it(tmp_path):
    from core.importers.hf_folder import find_licence

    assert find_licence(tmp_path, {}) == "not stated in the folder"
    (tmp_path / "LICENSE").write_text("\n  MIT License\n\nCopyright ...\n")
    assert find_licence(tmp_path, {}) == "see the folder's LICENSE file (it begins: 'MIT License')"
    (tmp_path / "README.md").write_text("---\nlanguage: en\nlicense:\n- apache-2.0\n- cc-by-4.0\n---\n# model\n")
    assert find_licence(tmp_path, {}) == "apache-2.0, cc-by-4.0 (README.md front matter 'license')"
    assert find_licence(tmp_path, {"license": "bsd-3-clause"}) == "bsd-3-clause (config.json 'license')"


def test_a_float16_import_records_its_precision(good_folder, tmp_path):
    assert main(["import-hf", str(good_folder), "--out", str(tmp_path / "half"), "--dtype", "float16"]) == 0
    bundle = core.load(tmp_path / "half", device="cpu")
    assert bundle.info["dtype"] == "float16" and "saved as\n  float16" in (tmp_path / "half" / "card.md").read_text()
    assert all(torch.equal(p, p.half().float()) for p in bundle.model.parameters())  # float16 numbers


def test_without_stored_tables_no_sinusoid_table_is_built(good_folder, tmp_path, monkeypatch):
    """The layout was found by building both tables of max_position_embeddings x d_model before looking whether
    the file stores any (a config allowing 2^20 positions asked for GiBs): with none stored, none is built."""
    from core.importers import hf_marian_config

    folder = tmp_path / "hf"
    shutil.copytree(good_folder, folder)
    _edit_tensors(lambda t: [t.pop(name, None) for name in hf_marian_config.POSITIONS])(folder)
    _edit_json("config.json", max_position_embeddings=1 << 20)(folder)

    def refuse(*args, **kwargs):
        raise AssertionError("a sinusoid table was built")

    monkeypatch.setattr(hf_marian_config, "sinusoidal_table", refuse)
    cfg = hf_marian_config.config_from_marian(hf_families.read_hf_folder(folder))
    assert (cfg.pe_layout, cfg.max_positions) == ("concatenated_hf", 1 << 20)
