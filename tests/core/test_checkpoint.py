"""Checkpoint folders: a replacement that crashes at any point leaves a loadable checkpoint."""

import os
import shutil

import pytest
import torch
from conftest import build_tiny_checkpoint

import core.storage.checkpoint as ckpt
from core import CheckpointMeta, Transformer, list_checkpoints, load_checkpoint, save_checkpoint


def _first_weight(directory) -> torch.Tensor:
    model, _, _ = load_checkpoint(directory)
    return next(iter(model.state_dict().values())).clone()


@pytest.mark.parametrize("crash_at", [1, 2])  # 1: before anything moved; 2: between the two renames of the swap
def test_a_crash_inside_save_checkpoint_never_leaves_no_checkpoint(tmp_path, monkeypatch, crash_at):
    path = build_tiny_checkpoint(tmp_path / "best")
    before = _first_weight(path)
    model, tok, _ = load_checkpoint(path)
    shutil.copy(path / "tokenizer.model", tmp_path / "spm.model")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    calls = {"n": 0}
    real_replace = os.replace

    def crashing_replace(src, dst):
        calls["n"] += 1
        if calls["n"] == crash_at:
            raise OSError("simulated crash")
        return real_replace(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", crashing_replace)
    with pytest.raises(OSError, match="simulated crash"):
        save_checkpoint(model, tmp_path / "spm.model", path, card="# new\n", meta=CheckpointMeta(name="new"))
    monkeypatch.setattr(ckpt.os, "replace", real_replace)
    if crash_at == 2:
        assert not path.exists() and (tmp_path / ".best.old").is_dir()  # the state a crash there leaves
    assert [p.name for p in list_checkpoints(tmp_path)] == ["best"]  # listing puts it back ...
    torch.testing.assert_close(_first_weight(path), before)  # ... as it was before the failed save
    assert not (tmp_path / ".best.old").exists()
    # a later save goes through and leaves no leftovers
    save_checkpoint(model, tmp_path / "spm.model", path, card="# new\n", meta=CheckpointMeta(name="new"))
    torch.testing.assert_close(_first_weight(path), before + 1.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "best-spm.model", "best-spm.vocab", "spm.model"]


def test_loading_recovers_a_checkpoint_left_mid_swap(tmp_path):
    path = build_tiny_checkpoint(tmp_path / "m")
    before = _first_weight(path)
    os.replace(path, tmp_path / ".m.old")  # what a crash between the renames leaves
    torch.testing.assert_close(_first_weight(path), before)
    assert path.is_dir() and not (tmp_path / ".m.old").exists()


def test_a_leftover_partial_folder_is_never_listed_and_is_cleaned_by_the_next_save(tmp_path):
    path = build_tiny_checkpoint(tmp_path / "m")
    partial = tmp_path / ".m.abc123.partial"
    shutil.copytree(path, partial)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["m"]
    model, _, _ = load_checkpoint(path)
    assert isinstance(model, Transformer)
    save_checkpoint(model, path / "tokenizer.model", tmp_path / "m2", card="# c\n", meta=CheckpointMeta(name="m2"))
    assert partial.exists()  # another checkpoint's save leaves it alone
    shutil.copy(path / "tokenizer.model", tmp_path / "spm.model")
    save_checkpoint(model, tmp_path / "spm.model", path, card="# c\n", meta=CheckpointMeta(name="m"))
    assert not partial.exists()
