"""Options checked against the model before anything runs: the API raises InputError, the CLI says error: and
exits 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import core
from core import InferenceOptions, InputError
from core.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bundle(tiny_checkpoint):
    return core.load(tiny_checkpoint, device="cpu")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(beam_size=9000), "beam_size must be a whole number from 1 to 16"),
        (dict(beam_size=0), "beam_size"),
        (dict(beam_size=True), "beam_size"),
        (dict(beam_size=2.5), "beam_size"),
        (dict(max_len=-1), "max_len"),
        (dict(max_len=0), "max_len"),
        (
            dict(options=InferenceOptions(ablate=frozenset({("cross", 99, 0)}))),
            "cross layer 100 head 1: the model has 2",
        ),
        (dict(options=InferenceOptions(ablate=frozenset({("encoder", 0, 9)}))), "has 2 heads per layer"),
        (dict(options="PE off"), "options must be core.InferenceOptions"),
    ],
)
def test_bad_options_are_named(bundle, kwargs, message):
    with pytest.raises(InputError, match=message):
        bundle.translate("Is there any tea left?", **kwargs)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(top_k=0), "Record: top_k must be a whole number of at least 1, got 0"),
        (dict(top_k=-1), "top_k"),
        (dict(top_k=2.5), "top_k"),
        (dict(top_k=True), "top_k"),
        (dict(qkv="yes"), "Record: qkv must be true or false, got 'yes'"),
        (dict(activations=1), "Record: activations must be true or false"),
    ],
)
def test_a_bad_record_is_named(fields, message):
    with pytest.raises(InputError, match=message):
        core.Record(**fields)


def test_a_record_must_be_a_record_and_its_top_k_stops_at_the_vocabulary(bundle):
    with pytest.raises(InputError, match="record must be core.Record, got dict"):
        bundle.translate("Is there any tea left?", record={"top_k": 3})
    out = bundle.translate("Is there any tea left?", max_len=2, record=core.Record(top_k=10**6))
    assert out.trace["output.top_ids"].shape[-1] == bundle.config.tgt_vocab_size  # every id, none invented


def test_good_options_still_translate(bundle):
    out = bundle.translate(
        "Is there any tea left?",
        beam_size=2,
        max_len=4,
        record=core.Record(top_k=3),
        options=InferenceOptions(ablate=frozenset({("cross", 1, 1)})),
    )
    assert len(out.steps) <= 4 and all(len(s.top_k) == 3 for s in out.steps)


def test_an_ssru_model_has_no_decoder_heads_to_switch_off(tmp_path):
    from conftest import build_tiny_checkpoint

    ssru = core.load(build_tiny_checkpoint(tmp_path / "ssru", decoder_self="ssru"), device="cpu")
    with pytest.raises(InputError, match="no decoder attention"):
        ssru.translate("Hello.", options=InferenceOptions(ablate=frozenset({("decoder", 0, 0)})))


def cli(*args, env=None):
    """``python -m core ...`` in a process of its own: for what only a real process shows (its exit status, a
    terminal's encoding); the rest of the command line runs in-process (``main``), as tests/core/test_cli.py does."""
    return subprocess.run(
        [sys.executable, "-m", "core", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--beam", "9000"], "beam_size must be a whole number"),
        (["--device", "bogus"], "unknown device 'bogus'"),
        (["--shortlist"], "has no lexical shortlist"),
        (["--device", "cuda:0"] if not __import__("torch").cuda.is_available() else ["--device", "tpu"], "device"),
    ],
)
def test_cli_names_bad_options_without_a_traceback(tiny_checkpoint, capsys, extra, message):
    code = main(["translate", "--checkpoint", str(tiny_checkpoint), *extra, "Hello"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_the_cli_process_exits_2_on_a_bad_option_without_a_traceback(tiny_checkpoint):
    result = cli("translate", "--checkpoint", str(tiny_checkpoint), "--beam", "9000", "Hello")
    assert result.returncode == 2 and "beam_size must be a whole number" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_json_survives_an_ascii_terminal(tiny_checkpoint):
    result = cli(
        "translate", "--checkpoint", str(tiny_checkpoint), "--json", "Grüße, café!", env={"PYTHONIOENCODING": "ascii"}
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert "decoder.0.cross.weights" in data["attention"] and data["src_tokens"]


@pytest.mark.parametrize("text", ["\u200b\u200b", "\ufeff", " \u2060 \u200b ", "\u200e"])
def test_only_invisible_format_characters_is_empty(bundle, text):
    with pytest.raises(InputError, match="empty"):
        bundle.translate(text)


def test_invisible_characters_inside_words_are_dropped(bundle):
    plain = bundle.translate("Is there any tea left?", max_len=5)
    hidden = bundle.translate("Is\u200b there any\ufeff tea left?", max_len=5)
    assert hidden.src_tokens == plain.src_tokens and hidden.text == plain.text


@pytest.mark.parametrize("name", ["/etc/passwd", "../other/tokenizer.model", "sub/tokenizer.model", 5, None, ""])
def test_the_tokenizer_must_sit_in_the_checkpoint_folder(tiny_checkpoint, tmp_path, name):
    import json
    import shutil

    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    config["tokenizer"] = name
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(core.CheckpointError, match="'tokenizer' must name a file inside the checkpoint folder"):
        core.load(folder, device="cpu")


def _broken_copy(tiny_checkpoint, tmp_path, edit):
    import json
    import shutil

    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("d_ff", 10**8, "d_ff must be a whole number from 1 to 65,536"),
        ("d_model", "256", "d_model must be a whole number"),
        ("n_encoder_layers", 10**6, "n_encoder_layers must be a whole number from 1 to 128"),
        ("dropout", "high", "dropout must be a number"),
        ("eos_id", None, "eos_id must be an int"),
    ],
)
def test_a_broken_config_is_named_before_anything_is_built(tiny_checkpoint, tmp_path, field, value, message):
    folder = _broken_copy(tiny_checkpoint, tmp_path, lambda c: c["model"].__setitem__(field, value))
    with pytest.raises(core.CheckpointError, match=message):
        core.load(folder, device="cpu")


def test_deeply_nested_json_and_broken_weights_are_named(tiny_checkpoint, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "nested"
    folder.mkdir()
    (folder / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(core.CheckpointError, match="nested too deeply"):
        core.load(folder, device="cpu")
    for label, change, message in (
        ("nan", lambda t: torch.full_like(t, float("nan")), "NaN or infinite"),
        ("int8", lambda t: t.to(torch.int8), "holds torch.int8 values"),
    ):
        folder = _broken_copy(tiny_checkpoint, tmp_path / label, lambda c: None)
        state = load_file(str(folder / "model.safetensors"))
        name = next(k for k in state if k.endswith("ffn.linear1.weight"))
        state[name] = change(state[name])
        save_file(state, str(folder / "model.safetensors"))
        with pytest.raises(core.CheckpointError, match=f"tensor {name} {message}" if label == "int8" else message):
            core.load(folder, device="cpu")


def test_positional_encoding_switches_off_per_side(bundle):
    text = "The cat sleeps on the warm chair."
    both = bundle.teacher_forced(text, "Die Katze schläft.", options=InferenceOptions(positional_encoding=False))
    runs = {
        side: bundle.teacher_forced(text, "Die Katze schläft.", options=InferenceOptions(**{f"{side}_pe": False}))
        for side in ("encoder", "decoder")
    }
    trained = bundle.teacher_forced(text, "Die Katze schläft.")
    enc, dec = runs["encoder"].trace, runs["decoder"].trace
    assert not enc.positional_encoding("src").any() and enc.positional_encoding("tgt").any()
    assert dec.positional_encoding("src").any() and not dec.positional_encoding("tgt").any()
    # the encoder's attention is the as-trained one when only the decoder loses its positions, and vice versa
    np.testing.assert_allclose(dec.attention("encoder", 0), trained.trace.attention("encoder", 0), atol=1e-6)
    assert not np.allclose(enc.attention("encoder", 0), trained.trace.attention("encoder", 0))
    np.testing.assert_allclose(enc.attention("encoder", 0), both.trace.attention("encoder", 0), atol=1e-6)
    assert InferenceOptions(encoder_pe=False).describe() == "encoder PE off"
    assert InferenceOptions(decoder_pe=False).describe() == "decoder PE off"
    assert InferenceOptions(encoder_pe=False, decoder_pe=False).describe() == "PE off"
    opts = InferenceOptions(decoder_pe=False)
    assert InferenceOptions.from_dict(json.loads(json.dumps(opts.to_dict()))) == opts
    assert core.Trace.load(dec.to_json().encode()).options == opts
