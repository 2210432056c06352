"""The public API on a real checkpoint folder: load, translate, trace, bad input, corrupt files, CLI."""
import json
from pathlib import Path
import shutil

import numpy as np
import pytest
import torch

import core
from core import CheckpointError, InferenceOptions, InputError
from core.cli import main


@pytest.fixture(scope="module")
def bundle(tiny_checkpoint):
    return core.load(tiny_checkpoint, device="cpu")


def test_translate_exposes_tokens_trace_and_steps(bundle):
    out = bundle.translate("Is there any tea left?", max_len=8)
    assert isinstance(out.text, str)
    assert out.src_tokens[-1] == "</s>" and out.tgt_tokens[0] == "<s>"
    n_q, n_k = len(out.tgt_tokens), len(out.src_tokens)
    assert out.trace.attention("cross", 1).shape == (2, n_q, n_k)
    assert out.trace.attention("decoder", 0).shape == (2, n_q, n_q)
    assert out.trace.attention("encoder", 0).shape == (2, n_k, n_k)
    assert out.trace.scores("encoder", 1).dtype == np.float32
    assert out.trace.mask("decoder").dtype == np.bool_
    assert out.trace.positional_encoding("src").shape == (n_k, 16)
    assert len(out.steps) == len(out.output_tokens) == n_q
    step = out.steps[1]
    assert step.token == out.output_tokens[1] and len(step.top_k) == 10
    assert step.top_k[0][1] >= step.top_k[-1][1] and step.top_k[0][1] == pytest.approx(step.prob)
    assert step.attention("decoder", 1).shape == (2, 2)
    np.testing.assert_allclose(step.attention("cross", 0).sum(-1), 1.0, atol=1e-5)


def test_teacher_forced_trace_of_the_output_equals_translation(bundle):
    out = bundle.translate("The cat sleeps on the warm chair.", max_len=6)
    ids = [bundle.tokenizer.sp.piece_to_id(p) for p in out.output_tokens]
    src_ids, _ = bundle.encode_source("The cat sleeps on the warm chair.")
    tf = bundle._teacher_forced(src_ids, ids, InferenceOptions(), 10, True)
    for kind in out.trace.kinds:
        for layer in range(2):
            np.testing.assert_allclose(out.trace.attention(kind, layer), tf.trace.attention(kind, layer), atol=1e-5)


def test_beam_translation_is_traced(bundle):
    out = bundle.translate("Where is the railway station?", beam_size=3, max_len=8)
    assert out.beam_size == 3 and out.trace.attention("cross", 0).shape[1] == len(out.tgt_tokens)
    np.testing.assert_allclose(out.trace.attention("decoder", 1).sum(-1), 1.0, atol=1e-5)
    assert [s.token for s in out.steps] == out.output_tokens


def test_trace_teacher_forced_on_given_text(bundle):
    out = bundle.trace("How are you today?", "Wie geht es dir heute?")
    assert out.tgt_tokens[0] == "<s>" and out.output_tokens[-1] == "</s>"
    assert out.trace.attention("decoder", 1).shape[1] == len(out.tgt_tokens)


def test_batch_has_real_padding(bundle):
    texts, trace = bundle.translate_batch(["Hi.", "My brother bought a new car yesterday."], max_len=5)
    assert len(texts) == 2
    short = trace.select(0)
    assert "<pad>" in short.src_tokens[0]
    n_real = short.src_tokens[0].index("<pad>")
    assert not short.mask("encoder")[:, n_real:].any()
    assert np.all(short.attention("encoder", 0)[:, :, n_real:] == 0)


@pytest.mark.parametrize("text", ["", "   \n\t ", "\x00\x01\x02", 42])
def test_bad_input_raises_input_error(bundle, text):
    with pytest.raises(InputError, match="empty|Expected text"):
        bundle.translate(text)


def test_overlong_text_raises_or_truncates(bundle):
    text = "the cat " * 400
    with pytest.raises(InputError, match="tokens long"):
        bundle.translate(text)
    out = bundle.translate(text, truncate=True, max_len=3)
    assert out.truncated and len(out.src_tokens) == bundle.max_source_tokens
    with pytest.raises(InputError, match="characters"):
        bundle.translate("x" * 6000)


def test_emoji_and_unknown_scripts_are_handled(bundle):
    out = bundle.translate("I like 🍕 and 日本語", max_len=4)
    assert any("unknown" in n for n in out.notices)


def test_options_switch_per_call(bundle):
    a = bundle.translate("Please close the window.", max_len=5)
    b = bundle.translate("Please close the window.", InferenceOptions(positional_encoding=False), max_len=5)
    assert not b.trace.positional_encoding("src").any() and a.trace.positional_encoding("src").any()
    assert a.trace.options == InferenceOptions() and b.trace.options.positional_encoding is False


def test_checkpoint_round_trip_and_half_precision(tmp_path, bundle):
    path = core.save_checkpoint(bundle.model, bundle.tokenizer.path, tmp_path / "copy", card="# c\n",
                                meta=core.CheckpointMeta(name="copy"))
    again = core.load(path, device="cpu")
    for (k, v), (k2, v2) in zip(bundle.model.state_dict().items(), again.model.state_dict().items()):
        assert k == k2 and np.array_equal(v.numpy(), v2.numpy())
    import torch
    half = core.save_checkpoint(bundle.model, bundle.tokenizer.path, tmp_path / "half", card="# h\n",
                                meta=core.CheckpointMeta(name="half"), dtype=torch.float16)
    h = core.load(half, device="cpu")
    w = h.model.src_embed.weight
    assert w.dtype == torch.float32 and torch.allclose(w, bundle.model.src_embed.weight, atol=1e-2)
    assert (half / "model.safetensors").stat().st_size < (path / "model.safetensors").stat().st_size * 0.6


@pytest.mark.parametrize("damage, message", [
    ("missing_weights", "model.safetensors: missing"),
    ("truncated_weights", "model.safetensors: cannot be read"),
    ("bad_json", "config.json: not valid JSON"),
    ("missing_tokenizer", "tokenizer.model: missing"),
    ("mismatched", "does not match|has shape"),
    ("missing_config", "config.json: missing"),
])
def test_corrupt_checkpoint_names_the_file(tmp_path, tiny_checkpoint, damage, message):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint, broken)
    if damage == "missing_weights":
        (broken / "model.safetensors").unlink()
    elif damage == "truncated_weights":
        data = (broken / "model.safetensors").read_bytes()
        (broken / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif damage == "bad_json":
        (broken / "config.json").write_text('{"model": {')
    elif damage == "missing_tokenizer":
        (broken / "tokenizer.model").unlink()
    elif damage == "mismatched":
        cfg = json.loads((broken / "config.json").read_text())
        cfg["model"]["d_ff"] = 48
        (broken / "config.json").write_text(json.dumps(cfg))
    elif damage == "missing_config":
        (broken / "config.json").unlink()
    with pytest.raises(CheckpointError, match=message):
        core.load(broken, device="cpu")


def test_checkpoint_never_unpickles(tiny_checkpoint):
    files = {p.name for p in tiny_checkpoint.iterdir()}
    assert files == {"model.safetensors", "config.json", "tokenizer.model", "card.md"}


def test_trace_exports(bundle):
    out = bundle.translate("Is there any tea left?", max_len=4)
    data = json.loads(out.trace.to_json())
    assert data["src_tokens"][0] == out.src_tokens
    assert len(data["arrays"]["attention.cross.0"][0]) == 2
    assert data["arrays"]["scores.decoder.0"][0][0][0][1] is None  # -inf masked score
    import io
    npz = np.load(io.BytesIO(out.trace.to_npz()))
    np.testing.assert_array_equal(npz["attention.encoder.1"][0], out.trace.attention("encoder", 1))


def test_cli_translate_json_and_info(tiny_checkpoint, capsys):
    assert main(["translate", "--checkpoint", str(tiny_checkpoint), "--json", "How are you today?"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"text", "src_tokens", "tgt_tokens", "attention"}
    assert np.array(data["attention"]["cross.1"]).shape[0] == 2
    assert main(["info", str(tiny_checkpoint)]) == 0
    assert "parameters" in capsys.readouterr().out
    assert main(["translate", "--checkpoint", str(tiny_checkpoint), " "]) == 2
    assert "empty" in capsys.readouterr().err


def test_json_export_keeps_tokens_that_look_like_nan(bundle):
    import torch

    src_ids, _ = bundle.encode_source("How are you today?")
    src = torch.tensor([src_ids])
    rec = core.Recorder()
    bundle.model(src, torch.tensor([[bundle.config.bos_id, 5]]), recorder=rec)
    tokens = ["\u2581NaN", "NaN", "Infinity"] + ["x"] * (len(src_ids) - 3)
    trace = rec.freeze(InferenceOptions(), [tokens], [["<s>", "NaN"]], 2, {"encoder": 2, "decoder": 2, "cross": 2})
    data = json.loads(trace.to_json())
    assert data["src_tokens"][0] == tokens and data["tgt_tokens"][0] == ["<s>", "NaN"]
    assert data["arrays"]["scores.decoder.0"][0][0][0][1] is None


def test_trace_arrays_are_read_only(bundle):
    out = bundle.translate("Is there any tea left?", max_len=3)
    with pytest.raises(ValueError):
        out.trace.attention("encoder", 0)[0, 0, 0] = 1.0


def test_causal_mask_off_steps_show_what_each_step_computed(bundle):
    out = bundle.translate("Where is the railway station?", InferenceOptions(causal_mask=False), max_len=6)
    assert len(out.steps) >= 2
    for step in out.steps:
        rows = step.attention("decoder", 0)
        assert rows.shape == (2, step.index + 1)  # this step saw the prefix so far, no more
        np.testing.assert_allclose(rows.sum(-1), 1.0, atol=1e-5)


def test_truncate_cuts_overlong_character_input_with_a_notice(bundle):
    out = bundle.translate("Hello there. " * 600, truncate=True, max_len=3)
    assert out.truncated and any("characters" in n for n in out.notices)


def test_checkpoint_without_card_is_refused(tmp_path, tiny_checkpoint):
    broken = tmp_path / "nocard"
    shutil.copytree(tiny_checkpoint, broken)
    (broken / "card.md").unlink()
    with pytest.raises(CheckpointError, match="card.md: missing"):
        core.load(broken, device="cpu")


def test_corrupt_tokenizer_names_the_file(tmp_path, tiny_checkpoint):
    broken = tmp_path / "badtok"
    shutil.copytree(tiny_checkpoint, broken)
    (broken / "tokenizer.model").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(CheckpointError, match="tokenizer.model: not a readable SentencePiece model"):
        core.load(broken, device="cpu")


def test_loading_never_unpickles(monkeypatch, tiny_checkpoint):
    import pickle

    import torch

    def refuse(*args, **kwargs):
        raise AssertionError("a checkpoint load tried to unpickle")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    assert core.load(tiny_checkpoint, device="cpu").translate("Hi.", max_len=2).text is not None


def test_cli_eval_prints_bleu_and_chrf(tiny_checkpoint, tmp_path, capsys):
    lines = (Path(__file__).parent / "fixtures" / "tiny_corpus.txt").read_text(encoding="utf-8").splitlines()
    (tmp_path / "test.en").write_text("\n".join(lines[0::2]) + "\n", encoding="utf-8")
    (tmp_path / "test.de").write_text("\n".join(lines[1::2]) + "\n", encoding="utf-8")
    assert main(["eval", "--checkpoint", str(tiny_checkpoint), "--split", str(tmp_path), "--beams", "1,2",
                 "--limit", "4", "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert set(scores) == {"greedy", "beam2"} and scores["greedy"]["n"] == 4
    model, tok, _ = core.load_checkpoint(tiny_checkpoint)
    from core.evaluate import score, translate_many
    hyps = translate_many(model, tok, lines[0::2][:4])
    assert scores["greedy"]["chrf"] == pytest.approx(score(hyps, lines[1::2][:4])["chrf"], abs=0.01)


def test_translate_many_batches_by_token_budget_keeps_order_and_counts(tiny_checkpoint):
    from core.evaluate import translate_many
    model, tok, _ = core.load_checkpoint(tiny_checkpoint)
    torch.manual_seed(0)  # a new, confident output layer: varied outputs that end (eos) before max_len
    with torch.no_grad():
        model.output = torch.nn.Linear(model.config.d_model, model.config.tgt_vocab_size)
        model.output.weight.normal_(0, 3)
        model.output.bias.zero_()
        model.output.bias[model.config.eos_id] = 20.0
    lines = (Path(__file__).parent / "fixtures" / "tiny_corpus.txt").read_text(encoding="utf-8").splitlines()[:9]
    one_by_one = [translate_many(model, tok, [s])[0] for s in lines]
    assert all(one_by_one) and len(set(one_by_one)) >= 5  # the comparison below can tell orders apart
    counts: dict[str, int] = {}
    batched = translate_many(model, tok, lines, max_tokens=40, counts=counts)  # several batches, sorted by length
    assert batched == one_by_one  # input order, and padding changes nothing
    assert counts["source_tokens"] == sum(len(tok.encode(s)) + 1 for s in lines)
    longest = max(len(tok.encode(s)) + 1 for s in lines)
    assert len(lines) <= counts["output_tokens"] <= len(lines) * (2 * longest + 10)  # eos counted; at most max_len
    cut: dict[str, int] = {}
    translate_many(model, tok, lines, max_source_tokens=2, counts=cut)
    assert cut["source_tokens"] == sum(min(len(tok.encode(s)), 2) + 1 for s in lines)
    beam: dict[str, int] = {}
    assert len(translate_many(model, tok, lines[:2], beam_size=2, counts=beam)) == 2 and beam["output_tokens"] >= 2
