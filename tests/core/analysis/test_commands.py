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


def test_contrastive_attribution_as_json_and_as_text(tiny_checkpoint, capsys):
    args = ("attribution", "--checkpoint", str(tiny_checkpoint), "--position", "2", "--contrast", "warm")
    code, out, _ = run(capsys, *args, "--json", TEXT)
    data = json.loads(out)
    assert code == 0 and data["position"] == 1 and data["contrast_piece"] == "\u2581warm"
    assert data["contrast_kind"] == "logit_diff" and data["explained"] == "log p(y_t) - log p(c)"
    assert data["f_input"] == pytest.approx(data["logprob"] - data["contrast_logprob"], abs=1e-5)
    total = sum(data["source_ig"]) + sum(data["target_ig"])
    assert total - (data["f_input"] - data["f_baseline"]) == pytest.approx(data["ig_delta"], abs=1e-4)
    code, out, _ = run(capsys, *args, "--contrast-kind", "prob_diff", TEXT)
    assert code == 0 and "rather than '\u2581warm' (log p = " in out and "p(y_t) - p(c) = " in out
    code, out, _ = run(capsys, "attribution", "--checkpoint", str(tiny_checkpoint), "--json", TEXT)
    data = json.loads(out)
    assert data["contrast_piece"] is None and data["contrast_id"] is None and data["explained"] == "log p(y_t)"


@pytest.mark.parametrize(
    "args, message",
    [
        (["patching"], "needs --corrupt"),
        (["patching", "--corrupt", "Dog."], "same number of pieces"),
        (["attribution", "--position", "99"], "--position must be from 1"),
        (["attribution", "--steps", "0"], "--steps must be between 1 and 512, got 0"),
        (["attribution", "--contrast", "gato"], "the alternative 'gato' must be one piece of the target vocabulary"),
        (["attribution", "--contrast", "\u2581"], "the alternative '\u2581' encodes to no piece"),
        (["rollout", "--contrast", "warm"], "--contrast applies to attribution, not rollout"),
        (["attribution", "--contrast-kind", "prob_diff"], "--contrast-kind needs --contrast PIECE_OR_TEXT"),
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


def test_the_logit_lens_as_json_and_as_text(tiny_checkpoint, capsys):
    import core

    code, out, _ = run(capsys, "lens", "--checkpoint", str(tiny_checkpoint), "--json", TEXT)
    assert code == 0
    data = json.loads(out)
    translation = core.load(tiny_checkpoint).translate(TEXT, truncate=True)
    assert data["output_tokens"] == translation.output_tokens
    for step, want in zip(data["steps"], translation.steps, strict=True):
        last = step["layers"][-1]  # the last layer's lens: the model's own top five
        assert [x["piece"] for x in last["top"]] == [piece for piece, _ in want.top_k[:5]]
        assert last["chosen_rank"] == 1 and last["chosen_p"] == pytest.approx(want.prob, abs=1e-5)
    code, out, _ = run(capsys, "lens", "--checkpoint", str(tiny_checkpoint), TEXT)
    assert code == 0 and out.startswith("logit lens over 2 decoder layers") and "top from layer" in out


def test_translate_samples_with_a_seed(tiny_checkpoint, capsys):
    def translate(*extra):
        code = main(["translate", "--checkpoint", str(tiny_checkpoint), *extra, TEXT])
        out, err = capsys.readouterr()
        return code, out, err

    _, greedy, _ = translate()
    assert translate("--temperature", "0")[1] == greedy  # temperature 0: the top choice
    hot = translate("--temperature", "3", "--seed", "5")
    assert hot[0] == 0 and translate("--temperature", "3", "--seed", "5")[1] == hot[1]  # the same seed replays
    code, _, err = translate("--top-p", "1.5")
    assert code == 2 and "top-p is a probability above 0 and at most 1" in err
    code, _, err = translate("--temperature", "1", "--beam", "2")
    assert code == 2 and "beam size 1" in err
