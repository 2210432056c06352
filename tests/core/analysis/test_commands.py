"""python -m core explain ...: each analysis as text and as JSON; bad requests say what is wrong (exit 2)."""

import json

import pytest

from core.cli import main

TEXT = "The cat sleeps on the warm chair."


def run(capsys, *args):
    code = main(["explain", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_importance_and_rollout_as_json(tiny_checkpoint, capsys):
    code, out, _ = run(capsys, "importance", "--checkpoint", str(tiny_checkpoint), "--json", TEXT)
    data = json.loads(out)
    assert code == 0 and len(data["heads"]) == 12
    deltas = [h["delta_logprob"] for h in data["heads"]]
    assert deltas == sorted(deltas)
    code, out, _ = run(capsys, "rollout", "--checkpoint", str(tiny_checkpoint), "--json", "--fusion", "max", TEXT)
    data = json.loads(out)
    assert code == 0 and data["fusion"] == "max" and len(data["source"]) == len(data["target"])


def test_importance_estimate_says_it_is_one(tiny_checkpoint, capsys):
    code, out, _ = run(capsys, "importance", "--checkpoint", str(tiny_checkpoint), "--estimate", "--json", TEXT)
    data = json.loads(out)
    assert code == 0 and data["exact"] is False and len(data["heads"]) == 12
    assert all(h["output_changed"] is None for h in data["heads"])
    code, out, _ = run(capsys, "importance", "--checkpoint", str(tiny_checkpoint), "--estimate", TEXT)
    assert code == 0 and "estimated to first order from one gradient pass" in out


def test_patching_and_attribution_as_text(tiny_checkpoint, capsys):
    code, out, _ = run(
        capsys, "patching", "--checkpoint", str(tiny_checkpoint), "--corrupt", "The car sleeps on the warm chair.", TEXT
    )
    assert code == 0 and "encoder layer 2" in out and "best cross-attention head" in out
    code, out, _ = run(capsys, "attribution", "--checkpoint", str(tiny_checkpoint), "--position", "1", TEXT)
    assert code == 0 and "integrated gradients (32 steps, baseline: position" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["patching"], "needs --corrupt"),
        (["patching", "--corrupt", "Dog."], "same number of pieces"),
        (["attribution", "--position", "99"], "--position must be from 1"),
        (["attribution", "--steps", "0"], "--steps must be between 1 and 512, got 0"),
        (["importance", "--top", "0"], "--top must be at least 1"),
        (["rollout", "--estimate"], "--estimate applies to importance, not rollout"),
    ],
)
def test_bad_requests(tiny_checkpoint, capsys, args, message):
    code, _, err = run(capsys, args[0], "--checkpoint", str(tiny_checkpoint), *args[1:], TEXT)
    assert code == 2 and message in err


def test_sources_as_json_and_as_text(tiny_checkpoint, capsys):
    code, out, _ = run(capsys, "sources", "--checkpoint", str(tiny_checkpoint), "--json", TEXT)
    data = json.loads(out)
    assert code == 0 and not data["forced"] and len(data["matrix"]) == len(data["target_pieces"])
    assert data["source_share"] == pytest.approx(sum(data["token_source_share"]) / len(data["target_pieces"]), abs=1e-4)
    code, out, _ = run(capsys, "sources", "--checkpoint", str(tiny_checkpoint), "--translation", "Le chat dort.", TEXT)
    assert code == 0 and out.startswith("source share of the translation given (teacher-forced): ")
    code, _, err = run(capsys, "rollout", "--checkpoint", str(tiny_checkpoint), "--translation", "Le chat.", TEXT)
    assert code == 2 and "--translation applies to sources, not rollout" in err
