"""The public API on a real checkpoint folder: load, translate, trace, bad input, corrupt files, CLI."""

import dataclasses
import inspect
import io
import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import core
from core import CheckpointError, InferenceOptions, InputError, Recorder, Trace
from core.cli import main
from core.decoding.search import beam_search, greedy
from core.recording.call import Call

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


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
    assert out.steps is out.steps  # made once: pages index it per step (the Steps slider labels every one)
    step = out.steps[1]
    assert step.token == out.output_tokens[1] and len(step.top_k) == 10
    assert step.top_k[0][1] >= step.top_k[-1][1] and step.top_k[0][1] == pytest.approx(step.prob)
    assert step.attention("decoder", 1).shape == (2, 2)
    np.testing.assert_allclose(step.attention("cross", 0).sum(-1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(step.attention("cross", 0), out.trace.attention("cross", 0)[:, 1])
    assert out.source_text == "Is there any tea left?" and out.options == InferenceOptions()
    assert out.trace.meta["model"] == bundle.name


def test_teacher_forced_trace_of_the_output_equals_translation(bundle):
    out = bundle.translate("The cat sleeps on the warm chair.", max_len=6)
    src = torch.tensor(out.trace["ids.src"][None])
    tgt = torch.tensor(out.trace["ids.tgt"][None])
    assert tgt.shape[1] == len(out.output_tokens) and tgt[0, 0] == bundle.config.bos_id
    np.testing.assert_array_equal(out.trace["ids.tgt"][1:], out.trace["output.ids"][:-1])
    rec = Recorder(bundle.model, qkv=True)
    with torch.no_grad():
        bundle.model(src, tgt, call=Call(recorder=rec, fast=bundle.fast))
    tf = rec.freeze(bundle.tokenizer.piece)
    assert tf.tgt_tokens == out.tgt_tokens and tf.src_tokens == out.src_tokens
    for kind in out.trace.kinds:
        for layer in range(2):
            np.testing.assert_allclose(out.trace.attention(kind, layer), tf.attention(kind, layer), atol=1e-5)
            for a, b in zip(out.trace.qkv(kind, layer), tf.qkv(kind, layer), strict=True):
                np.testing.assert_allclose(a, b, atol=1e-5)


def test_record_more_is_the_same_translation_with_activations(bundle):
    opts = InferenceOptions(ablate=frozenset({("cross", 1, 0)}))
    out = bundle.translate("The cat sleeps on the warm chair.", opts, max_len=6, record=core.Record(qkv=False))
    more = bundle.record_more(out)
    assert (more.text, more.source_text, more.options, more.beam_size) == (
        out.text,
        out.source_text,
        out.options,
        out.beam_size,
    )
    for name in out.trace.keys():
        a, b = np.asarray(out.trace[name], float), np.asarray(more.trace[name], float)
        if name.endswith("self.scores_raw") and name.startswith("decoder"):  # decoding never saw later keys
            assert np.isneginf(a[~np.isfinite(a)]).all() and np.isfinite(b).all()
            b = np.where(np.isfinite(a), b, a)
        np.testing.assert_allclose(b, a, atol=1e-5)
    assert "encoder.0.self.q" in more.trace and "decoder.1.out" in more.trace and "decoder.0.cross.heads" in more.trace
    # with the causal mask off each step saw only its prefix: decoded again, every array (step rows included) kept
    free = bundle.translate(
        "The cat sleeps.", InferenceOptions(causal_mask=False), max_len=5, record=core.Record(top_k=4)
    )
    again = bundle.record_more(free)
    assert again.text == free.text and again.trace["output.top_ids"].shape[-1] == 4
    for name in free.trace.keys():
        np.testing.assert_allclose(np.asarray(again.trace[name], float), np.asarray(free.trace[name], float), atol=1e-5)
    assert any(k.endswith("step_rows") for k in again.trace.keys()) and "decoder.0.out" in again.trace
    foreign = core.Translation(dataclasses.replace(out.trace, meta={**out.trace.meta, "model": "another"}))
    with pytest.raises(InputError, match="made by 'another'"):
        bundle.record_more(foreign)


def test_beam_translation_is_traced(bundle):
    text = "Where is the railway station?"
    out = bundle.translate(text, beam_size=3, max_len=8)
    assert out.beam_size == 3 and out.trace.attention("cross", 0).shape[1] == len(out.tgt_tokens)
    np.testing.assert_allclose(out.trace.attention("decoder", 1).sum(-1), 1.0, atol=1e-5)
    assert [s.token for s in out.steps] == out.output_tokens
    src_ids, _ = bundle.encode_source(text)
    src = torch.tensor([src_ids])
    ids = beam_search(
        bundle.model,
        src,
        torch.ones_like(src, dtype=torch.bool),
        call=Call(options=InferenceOptions(), fast=None, max_len=8, beam_size=3),
    )
    assert out.trace["output.ids"].tolist() == ids  # the beam's best output is what the trace holds


def test_trace_teacher_forced_on_given_text(bundle):
    out = bundle.teacher_forced("How are you today?", "Wie geht es dir heute?")
    assert out.tgt_tokens[0] == "<s>" and out.output_tokens[-1] == "</s>"
    assert out.trace.attention("decoder", 1).shape[1] == len(out.tgt_tokens)


def test_a_padded_batch_translates_each_item_as_it_would_alone(bundle):
    sentences = ["Hi.", "My brother bought a new car yesterday.", "Where is it?"]
    batch = bundle.translate_batch(sentences, max_len=5)
    assert len(batch) == 3 and all(one.trace.batch_size == 3 for one in batch)
    for i, sentence in enumerate(sentences):
        alone = bundle.translate(sentence, max_len=5)
        assert batch[i].text == alone.text and batch[i].source_text == alone.source_text
        assert batch[i].beam_size == 1 and batch[i].options == alone.options
        item = batch[i].trace
        assert item.item == i and batch[0].trace.select(i).src_tokens == item.src_tokens  # the batch, from any item
        n_real = len(alone.src_tokens)
        assert item.src_tokens[:n_real] == alone.src_tokens
        assert item.src_tokens[n_real:] == ["<pad>"] * (len(item.src_tokens) - n_real)
        n = len(alone.steps)  # the batch may run more steps (after this item's eos)
        assert item.output_tokens[:n] == alone.output_tokens
        np.testing.assert_allclose(item["output.probs"][:n], alone.trace["output.probs"], atol=1e-5)
        for layer in range(2):
            enc = item.attention("encoder", layer)
            np.testing.assert_allclose(enc[:, :n_real, :n_real], alone.trace.attention("encoder", layer), atol=1e-5)
            assert np.all(enc[:, :, n_real:] == 0)
            cross = item.attention("cross", layer)[:, :n]
            np.testing.assert_allclose(cross[..., :n_real], alone.trace.attention("cross", layer), atol=1e-5)
            assert np.all(cross[..., n_real:] == 0)
        assert not item.mask("encoder")[:, n_real:].any() and not item.mask("cross", "padding")[:, n_real:].any()
    assert "<pad>" in batch[0].src_tokens  # the short sentence really was padded


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
    path = core.save_checkpoint(
        bundle.model, bundle.tokenizer.path, tmp_path / "copy", card="# c\n", meta=core.CheckpointMeta(name="copy")
    )
    again = core.load(path, device="cpu")
    for (k, v), (k2, v2) in zip(bundle.model.state_dict().items(), again.model.state_dict().items(), strict=True):
        assert k == k2 and np.array_equal(v.numpy(), v2.numpy())
    half = core.save_checkpoint(
        bundle.model,
        bundle.tokenizer.path,
        tmp_path / "half",
        card="# h\n",
        meta=core.CheckpointMeta(name="half"),
        dtype=torch.float16,
    )
    h = core.load(half, device="cpu")
    w = h.model.src_embed.weight
    assert w.dtype == torch.float32 and torch.allclose(w, bundle.model.src_embed.weight, atol=1e-2)
    assert (half / "model.safetensors").stat().st_size < (path / "model.safetensors").stat().st_size * 0.6
    if core.fast.weights.kernel_available():  # float16 numbers: the bundle's fast path packs them, and changes nothing
        lin = h.model.decoder_layers[0].ffn.linear1
        with torch.no_grad():
            assert h.fast.bind(lin.weight, lin.bias, 1)[0] is torch.fbgemm_linear_fp16_weight
    out = h.translate("Is there any tea left?", max_len=8)
    src = torch.tensor(out.trace["ids.src"][None])
    reference = greedy(
        h.model,
        src,
        torch.ones_like(src, dtype=torch.bool),
        call=Call(options=InferenceOptions(), fast=None, max_len=8),
    )
    assert out.trace["output.ids"].tolist() == reference.tokens[0, 1 : 1 + reference.lengths[0]].tolist()


@pytest.mark.parametrize(
    "damage, message",
    [
        ("missing_weights", "model.safetensors: missing"),
        ("truncated_weights", "model.safetensors: cannot be read"),
        ("bad_json", "config.json: not valid JSON"),
        ("missing_tokenizer", "tokenizer.model: missing"),
        ("mismatched", "does not match|has shape"),
        ("missing_config", "config.json: missing"),
    ],
)
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


class _Touch:
    """Unpickling this creates ``marker``: a stand-in for code a malicious pickle would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


@pytest.mark.parametrize("how", ["pickle", "torch.save"])
def test_checkpoint_never_unpickles(tmp_path, tiny_checkpoint, how):
    marker = tmp_path / f"unpickled-{how.replace('.', '-')}"
    payload = tmp_path / "payload"
    if how == "pickle":
        payload.write_bytes(pickle.dumps({"weights": _Touch(marker)}))
    else:
        torch.save({"weights": _Touch(marker)}, payload)
    bad = tmp_path / "bad"
    shutil.copytree(tiny_checkpoint, bad)
    shutil.copyfile(payload, bad / "model.safetensors")  # the weights file is a pickle
    with pytest.raises(CheckpointError, match="model.safetensors: cannot be read"):
        core.load(bad, device="cpu")
    beside = tmp_path / "beside"
    shutil.copytree(tiny_checkpoint, beside)
    for name in ("pytorch_model.bin", "model.pt", "model.pkl"):  # pickles next to real weights: never read
        shutil.copyfile(payload, beside / name)
    assert core.load(beside, device="cpu").translate("Hi.", max_len=2).text is not None
    assert not marker.exists()
    if how == "pickle":  # the payload is live: unpickling it does create the marker
        pickle.loads(payload.read_bytes())
    else:
        torch.load(payload, weights_only=False)
    assert marker.exists()


def test_trace_exports_name_arrays_by_site(bundle):
    out = bundle.translate("Is there any tea left?", max_len=4)
    data = json.loads(out.trace.to_json())
    assert len(data["arrays"]["decoder.0.cross.weights"]["data"][0]) == 2  # batch item 0: two heads
    assert data["arrays"]["decoder.0.self.scores"]["data"][0][0][0][1] is None  # -inf masked score
    assert [data["vocab"][str(i)] for i in data["arrays"]["ids.src"]["data"][0]] == out.src_tokens
    npz = np.load(io.BytesIO(out.trace.to_npz()), allow_pickle=False)
    np.testing.assert_array_equal(npz["encoder.1.self.weights"][0], out.trace.attention("encoder", 1))


def test_cli_translate_json_and_info(tiny_checkpoint, capsys):
    assert main(["translate", "--checkpoint", str(tiny_checkpoint), "--json", "How are you today?"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) >= {"text", "src_tokens", "tgt_tokens", "attention"}
    assert np.array(data["attention"]["decoder.1.cross.weights"]).shape[0] == 2
    assert main(["info", str(tiny_checkpoint)]) == 0
    assert "parameters" in capsys.readouterr().out
    assert main(["translate", "--checkpoint", str(tiny_checkpoint), " "]) == 2
    assert "empty" in capsys.readouterr().err


def test_json_export_keeps_tokens_that_look_like_nan(bundle):
    src = torch.tensor([[10, 11, 12, 13, bundle.config.eos_id]])
    rec = Recorder(bundle.model)
    with torch.no_grad():
        bundle.model(src, torch.tensor([[bundle.config.bos_id, 11]]), call=Call(recorder=rec))
    weird = {10: "\u2581NaN", 11: "NaN", 12: "Infinity", 13: "-Infinity"}
    trace = rec.freeze(lambda i: weird.get(i, f"p{i}"))
    assert trace.src_tokens == ["\u2581NaN", "NaN", "Infinity", "-Infinity", f"p{bundle.config.eos_id}"]
    text = trace.to_json()
    data = json.loads(text)  # strict JSON: no bare NaN / Infinity anywhere
    assert data["arrays"]["decoder.0.self.scores"]["data"][0][0][0][1] is None
    back = Trace.load(text.encode("utf-8"))
    assert back.src_tokens == trace.src_tokens and back.tgt_tokens == [f"p{bundle.config.bos_id}", "NaN"]
    assert np.isneginf(back.scores("decoder", 0)[0, 0, 1])


def test_truncate_cuts_overlong_character_input_with_a_notice(bundle):
    out = bundle.translate("Hello there. " * 600, truncate=True, max_len=3)
    assert out.truncated and any("characters" in n for n in out.notices)


def test_translate_batch_cuts_an_overlong_text_as_translate_does(bundle):
    """translate_batch(truncate=True) refused a text over MAX_CHARS characters that translate(truncate=True) cut."""
    long = "Hello there. " * 600  # 7,800 characters, over the 5,000 limit
    with pytest.raises(InputError, match="characters long"):
        bundle.translate_batch([long, "Hello"], max_len=3)
    outs = bundle.translate_batch([long, "Hello"], max_len=3, truncate=True)
    alone = bundle.translate(long, max_len=3, truncate=True)
    assert len(outs) == 2 and outs[0].text == alone.text
    assert outs[0].source_text == alone.source_text and len(outs[0].source_text) <= core.inputs.MAX_CHARS
    assert outs[0].notices == alone.notices and outs[0].truncated and not outs[1].notices  # each text's own notices


def test_translate_batch_takes_translate_s_keywords_and_records_as_it_does(bundle):
    """translate_batch returned (texts, Trace), took max_len positionally and did not record q/k/v by default."""
    with pytest.raises(TypeError):
        bundle.translate_batch(["Hello"], None, 3)  # max_len is keyword-only, as in translate
    batch = bundle.translate_batch(["Hello", "Where is it?"], max_len=3, record=core.Record(top_k=2))
    alone = bundle.translate("Hello", max_len=3, record=core.Record(top_k=2))
    assert all(isinstance(one, core.Translation) for one in batch)
    assert "decoder.0.self.q" in batch[0].trace and "decoder.0.self.q" in alone.trace  # q/k/v by default
    assert batch[0].trace["output.top_ids"].shape[-1] == alone.trace["output.top_ids"].shape[-1] == 2
    assert [s.token for s in batch[0].steps[: len(alone.steps)]] == [s.token for s in alone.steps]
    bare = bundle.translate_batch(["Hello"], max_len=3, record=core.Record(qkv=False, activations=True))
    assert "decoder.0.self.q" not in bare[0].trace and "embed.src" in bare[0].trace


def test_translate_and_translate_batch_take_the_same_keywords_with_the_same_defaults(bundle):
    def keywords(method):
        parameters = inspect.signature(method).parameters.values()
        return {p.name: p.default for p in parameters if p.kind is p.KEYWORD_ONLY or p.name == "options"}

    assert keywords(bundle.translate) == keywords(bundle.translate_batch)
    assert set(keywords(bundle.translate)) == {"options", "beam_size", "max_len", "truncate", "record", "sampling"}
    assert keywords(bundle.translate)["record"] == core.Record(top_k=10, qkv=True, activations=False)


def test_a_beam_batch_gives_each_text_translate_s_beam_output_traced_as_one_batch(bundle):
    texts = ["Where is the railway station?", "Hello", "The cat sleeps on the warm chair."]
    batch = bundle.translate_batch(texts, beam_size=3, max_len=8, record=core.Record(top_k=4))
    for text, one in zip(texts, batch, strict=True):
        alone = bundle.translate(text, beam_size=3, max_len=8, record=core.Record(top_k=4))
        n, m = len(alone.output_ids), len(alone.src_tokens)
        assert one.text == alone.text and one.beam_size == 3 and one.output_ids[:n] == alone.output_ids
        assert set(one.output_ids[n:]) <= {bundle.config.eos_id}  # a shorter output goes on with eos
        np.testing.assert_allclose(one.trace["output.top_probs"][:n], alone.trace["output.top_probs"], atol=1e-5)
        for kind in ("cross", "decoder"):
            rows = one.trace.attention(kind, 1)[:, :n, : (m if kind == "cross" else n)]
            np.testing.assert_allclose(rows, alone.trace.attention(kind, 1), atol=1e-5)
    assert batch[0].trace.batch_size == 3 and batch[1].src_tokens[-1] == "<pad>"  # one padded batch


def test_translate_from_forces_the_prefix_then_decodes_greedily(bundle):
    text = "Is there any tea left?"
    free = bundle.translate(text, max_len=8)
    runner_up = int(free.trace["output.top_ids"][0][1])  # the model's second choice at the first step
    out = bundle.translate_from(text, [runner_up], max_len=8, record=core.Record(top_k=3, qkv=False))
    assert out.output_ids[0] == runner_up and out.forced_prefix == out.trace.meta["forced_prefix"] == 1
    assert out.steps[0].prob == pytest.approx(free.steps[0].top_k[1][1], abs=1e-6)  # its probability, as the model
    assert out.trace["output.top_ids"].shape[-1] == 3 and "decoder.0.self.q" not in out.trace
    after = bundle.translate_from(text, list(out.output_ids[:2]), max_len=8)
    assert after.output_ids == out.output_ids and after.forced_prefix == 2  # greedy after the prefix
    assert free.forced_prefix == 0 and "forced_prefix" not in free.trace.meta
    with pytest.raises(InputError, match="more than max_len=2"):
        bundle.translate_from(text, [runner_up] * 3, max_len=2)


@pytest.mark.parametrize(
    "text",
    [
        "\u200b\u200c\u200d",  # zero-width space, non-joiner, joiner: was translated from <unk>
        "\u200c",
        "\u200d \u200d",
        "\ufeff\u2060",  # byte-order mark, word joiner
        "\u0301\u0308",  # combining marks with no letter
        "\u2028\u2029\u3000\u00a0",  # line / paragraph separators, ideographic and no-break spaces
        "\U000e0041",  # a tag character (Cf)
    ],
)
def test_a_text_with_no_visible_character_is_refused(bundle, text):
    with pytest.raises(InputError, match="no visible character"):
        bundle.translate(text)
    with pytest.raises(InputError, match="no visible character"):
        bundle.translate_batch(["Hello", text])


@pytest.mark.parametrize("text", ["e\u0301", "a\u200db", "\u0915\u094d\u200d", "\U0001faea", "5", "?"])
def test_a_text_with_one_visible_character_is_translated(bundle, text):
    """A mark on a letter, joiners inside a word, an emoji newer than Python's tables (unassigned here)."""
    assert bundle.translate(text, max_len=2).source_text


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
    def refuse(*args, **kwargs):
        raise AssertionError("a checkpoint load tried to unpickle")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    assert core.load(tiny_checkpoint, device="cpu").translate("Hi.", max_len=2).text is not None


def test_load_and_translate_under_inference_mode(tiny_checkpoint, bundle):
    with torch.inference_mode():
        loaded = core.load(tiny_checkpoint, device="cpu")
        out = loaded.translate("Is there any tea left?", max_len=5)
    assert out.output_tokens == bundle.translate("Is there any tea left?", max_len=5).output_tokens


def test_cli_eval_prints_bleu_and_chrf(tiny_checkpoint, tmp_path, capsys):
    lines = (FIXTURES / "tiny_corpus.txt").read_text(encoding="utf-8").splitlines()
    (tmp_path / "test.en").write_text("\n".join(lines[0::2]) + "\n", encoding="utf-8")
    (tmp_path / "test.de").write_text("\n".join(lines[1::2]) + "\n", encoding="utf-8")
    assert (
        main(
            [
                "eval",
                "--checkpoint",
                str(tiny_checkpoint),
                "--split",
                str(tmp_path),
                "--beams",
                "1,2",
                "--limit",
                "4",
                "--json",
            ]
        )
        == 0
    )
    scores = json.loads(capsys.readouterr().out)
    assert set(scores) == {"greedy", "beam2"} and scores["greedy"]["n"] == 4
    model, tok, _ = core.load_checkpoint(tiny_checkpoint)
    from core.training.evaluate import score, translate_many

    hyps = translate_many(model, tok, lines[0::2][:4])
    assert scores["greedy"]["chrf"] == pytest.approx(score(hyps, lines[1::2][:4])["chrf"], abs=0.01)


def test_translate_many_batches_by_token_budget_keeps_order_and_counts(tiny_checkpoint):
    from core.training.evaluate import translate_many

    model, tok, _ = core.load_checkpoint(tiny_checkpoint)
    torch.manual_seed(0)  # a new, confident output layer: varied outputs that end (eos) before max_len
    with torch.no_grad():
        model.output = torch.nn.Linear(model.config.d_model, model.config.tgt_vocab_size)
        model.output.weight.normal_(0, 3)
        model.output.bias.zero_()
        model.output.bias[model.config.eos_id] = 20.0
    lines = (FIXTURES / "tiny_corpus.txt").read_text(encoding="utf-8").splitlines()[:9]
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


def test_translate_many_packs_the_weights_once_and_again_only_after_they_change(tiny_checkpoint):
    from core.training.evaluate import fast_weights, translate_many

    model, tok, _ = core.load_checkpoint(tiny_checkpoint)
    lines = (FIXTURES / "tiny_corpus.txt").read_text(encoding="utf-8").splitlines()[:3]
    first = fast_weights(model)
    before = translate_many(model, tok, lines)
    assert fast_weights(model) is first  # the same weights: the same copies, not packed again per call
    with torch.no_grad():
        model.output.weight.mul_(-1.0)  # written in place (as an optimizer step): new copies, new outputs
    second = fast_weights(model)
    assert second is not first and second.is_current()
    assert translate_many(model, tok, lines) == translate_many(model, tok, lines, beam_size=1)
    with torch.no_grad():
        model.output.weight.mul_(-1.0)
    assert translate_many(model, tok, lines) == before
    model.output = torch.nn.Linear(model.config.d_model, model.config.tgt_vocab_size)  # a replaced matrix
    assert fast_weights(model) is not fast_weights(core.load_checkpoint(tiny_checkpoint)[0])
    third = fast_weights(model)
    assert third is not second and id(model.output.weight) in {id(w) for w, _ in third._weights}


def test_a_text_longer_than_the_model_learned_from_gets_a_notice(tiny_checkpoint: Path, tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    text = "the cat sleeps on the warm chair and the dog sleeps on the mat"
    n = len(core.load(folder, device="cpu").tokenizer.encode(text))
    for trained, warned in ((n - 1, True), (n, False), ("12", False), (True, False)):
        (folder / "config.json").write_text(json.dumps({**config, "trained_source_pieces": trained}))
        out = core.load(folder, device="cpu").translate(text)
        said = [x for x in out.notices if "learned from inputs of at most" in x]
        assert bool(said) == warned, trained
        if warned:
            assert said[0].startswith(f"The text is {n} pieces long") and f"at most {n - 1} pieces" in said[0]
            assert core.Translation(Trace.load(out.trace.save(tmp_path / "t.npz"))).notices == out.notices


def test_encode_gives_the_source_ids_and_the_encoder_output_with_the_options(bundle):
    text = "The cat sleeps on the warm chair."
    off = InferenceOptions(positional_encoding=False)
    ids, memory = bundle.encode(text, off)
    assert ids == bundle.encode_source(text)[0]
    assert memory.shape == (len(ids), bundle.config.d_model)
    src, keep = bundle.padded([ids])
    with torch.inference_mode():  # the reference path: what a page compares across texts
        torch.testing.assert_close(memory, bundle.model.encode(src, keep, Call(options=off))[0], rtol=0, atol=0)
    assert not torch.allclose(bundle.encode(text)[1], memory)  # the options are applied
    with pytest.raises(InputError):
        bundle.encode(" ")
