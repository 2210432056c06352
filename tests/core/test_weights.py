"""core.storage.weights: a safetensors file's tensors become a model's parameters without a copy (the parameters are the
file's mapped pages), ties kept, the same outputs as load_state_dict; every tensor checked one at a time; and
loading a checkpoint peaks at about one copy of its weights (measured in a fresh process)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import build_tiny_checkpoint, tiny_config
from safetensors.torch import save_file

import core
from core import CheckpointError
from core.storage.checkpoint import CheckpointMeta, save_checkpoint
from core.storage.weights import assign_weights, empty_model, parameter_shapes, read_safetensors
from core.transformer.model import Transformer

REPO = Path(__file__).resolve().parents[2]


def mapped_ranges(path: Path) -> list[tuple[int, int]]:
    """The address ranges of this process that map the file ``path`` (Linux's /proc/self/maps)."""
    ranges = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and Path(fields[5]) == path.resolve():
            start, end = (int(x, 16) for x in fields[0].split("-"))
            ranges.append((start, end))
    return ranges


def saved(model: Transformer, path: Path) -> Path:
    aliases = model.tied_aliases()
    save_file({k: v.contiguous() for k, v in model.state_dict().items() if k not in aliases}, str(path))
    return path


VARIANTS = {
    "shared, tied": {},
    "separate embeddings": {"share_embeddings": False},
    "untied output": {"tie_output": False},
    "learned positions per side (BART)": dict(positional="learned", separate_positions=True, position_offset=2),
    "relative bias (T5)": dict(positional="relative", d_kv=5, attention_scale=False, norm_kind="rms", gated_ffn=True),
}


@pytest.mark.parametrize("overrides", VARIANTS.values(), ids=VARIANTS.keys())
def test_parameters_become_the_files_pages_with_ties_kept(tmp_path, overrides):
    torch.manual_seed(3)
    cfg = tiny_config(**overrides)
    source = Transformer(cfg).eval()
    path = saved(source, tmp_path / "w.safetensors")
    model = assign_weights(empty_model(cfg), read_safetensors(path), path).eval()
    assert {n: b for n, b in model.named_buffers()}.keys() == {n: b for n, b in source.named_buffers()}.keys()
    for name, buffer in source.named_buffers():  # the sinusoid tables are made, not read
        assert torch.equal(model.get_buffer(name), buffer), name
    ranges = mapped_ranges(path)
    assert ranges, "the file is not mapped"
    for name, param in model.named_parameters():
        assert any(a <= param.data_ptr() < b for a, b in ranges), f"{name} was copied out of the file"
        assert torch.equal(param, source.get_parameter(name)), name
    assert model.tied_aliases() == source.tied_aliases()
    if cfg.tie_output:
        assert model.output.weight is model.tgt_embed.weight
    src = torch.tensor([[5, 9, 12, 3, cfg.eos_id]])
    tgt = torch.tensor([[cfg.bos_id, 7, 8]])
    with torch.no_grad():
        assert torch.equal(model(src, tgt), source(src, tgt))


def test_a_later_alias_wins_as_load_state_dict_does(tmp_path):
    cfg = tiny_config()
    model = Transformer(cfg)
    state = {k: torch.randn(v.shape) for k, v in model.state_dict().items()}  # aliases with values of their own
    reference = Transformer(cfg)
    reference.load_state_dict(state)
    assign_weights(model, state, tmp_path / "w")
    assert torch.equal(model.src_embed.weight, reference.src_embed.weight)
    assert torch.equal(model.src_embed.weight, state["output.weight"])  # the last of the three tied names
    assert model.output.weight is model.src_embed.weight


def test_wrong_tensors_are_named(tmp_path):
    cfg = tiny_config()
    state = dict(Transformer(cfg).state_dict())
    del state["encoder_layers.0.self_attn.q_proj.weight"]
    with pytest.raises(CheckpointError, match=r"w: does not match the model: missing tensors \['encoder_layers.0"):
        assign_weights(Transformer(cfg), state, tmp_path / "w")
    state = {**Transformer(cfg).state_dict(), "extra.weight": torch.zeros(2)}
    with pytest.raises(CheckpointError, match=r"unexpected tensors \['extra.weight'\]"):
        assign_weights(Transformer(cfg), state, tmp_path / "w")
    state = {**Transformer(cfg).state_dict(), "encoder_layers.0.self_attn.q_proj.bias": torch.zeros(3)}
    with pytest.raises(CheckpointError, match=r"q_proj.bias has shape \(3,\), the model's is \(16,\)"):
        assign_weights(Transformer(cfg), state, tmp_path / "w")


def test_float16_tensors_take_the_models_dtype(tmp_path):
    cfg = tiny_config()
    state = {k: v.half() for k, v in Transformer(cfg).state_dict().items()}
    model = assign_weights(Transformer(cfg), state, tmp_path / "w")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    name = "encoder_layers.0.self_attn.q_proj.bias"
    assert torch.equal(model.get_parameter(name), state[name].float())


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (torch.tensor([1.0, float("nan")]), "tensor b holds NaN or infinite values"),
        (torch.tensor([[1.0, 2.0], [float("-inf"), 0.0]]).half(), "tensor b holds NaN or infinite values"),
        (torch.tensor([1, 2]), "tensor b holds torch.int64 values; weights are floating point"),
    ],
)
def test_each_tensor_is_checked(tmp_path, value, message):
    path = tmp_path / "w.safetensors"
    save_file({"a": torch.ones(3), "b": value}, str(path))
    with pytest.raises(CheckpointError, match=message):
        read_safetensors(path)


def test_an_unreadable_file_is_named(tmp_path):
    path = tmp_path / "w.safetensors"
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(CheckpointError, match="w.safetensors: cannot be read"):
        read_safetensors(path)


def test_a_table_left_unmade_is_named(tmp_path):
    cfg = tiny_config()
    model = empty_model(cfg)
    model.extra = torch.nn.Module()  # as if a module had grown a fixed table that empty_model does not build
    model.extra.register_buffer("table", torch.zeros(3, device="meta"), persistent=False)
    with pytest.raises(CheckpointError, match=r"w: the model's \['extra.table'\] were never given a value"):
        assign_weights(model, Transformer(cfg).state_dict(), tmp_path / "w")


def test_parameter_shapes_allocate_nothing():
    cfg = tiny_config(tie_output=False)
    shapes = parameter_shapes(cfg)
    assert shapes == {k: tuple(v.shape) for k, v in Transformer(cfg).state_dict().items()}


def test_a_loaded_checkpoint_reads_its_files_pages(tmp_path):
    checkpoint = build_tiny_checkpoint(tmp_path / "ckpt")
    bundle = core.load(checkpoint, device="cpu")
    ranges = mapped_ranges(checkpoint / "model.safetensors")
    assert all(any(a <= p.data_ptr() < b for a, b in ranges) for p in bundle.model.parameters())


PEAK = textwrap.dedent(
    """
    import json, sys
    import core
    from core.storage.checkpoint import load_checkpoint

    def hwm():
        status = dict(line.split(":", 1) for line in open("/proc/self/status"))
        return int(status["VmHWM"].split()[0]) * 1024
    before = hwm()
    model, _, _ = load_checkpoint(sys.argv[1], "cpu")
    print(json.dumps({"before": before, "after": hwm(), "dynamo": "torch._dynamo" in sys.modules}))
    """
)


def test_loading_a_checkpoint_peaks_at_about_one_copy_and_imports_no_dynamo(tmp_path):
    small = build_tiny_checkpoint(tmp_path / "small")
    torch.manual_seed(0)  # about 160 MB of float32 weights (fixed costs of tens of MB stay small beside them)
    model = Transformer(tiny_config(src_vocab_size=16000, tgt_vocab_size=16000, d_model=1024))
    meta = CheckpointMeta(name="big")
    checkpoint = save_checkpoint(model, small / "tokenizer.model", tmp_path / "ckpt", card="# big\n", meta=meta)
    weights = (checkpoint / "model.safetensors").stat().st_size
    assert weights > 150e6
    done = subprocess.run(
        [sys.executable, "-c", PEAK, str(checkpoint)], cwd=REPO, capture_output=True, text=True, check=True
    )
    peak = json.loads(done.stdout)
    # nothing but the check's one tensor at a time (the parameters are the file's pages, read when used); building
    # a model and copying the file into it held both: 2.8x these weights, measured before core.storage.weights
    assert peak["after"] - peak["before"] < 1.0 * weights, (peak, weights)
    # and quickly: the model built on the meta device ran no meta normal_ or arange, which import torch._dynamo
    # (2.4 s of every process that loaded a checkpoint)
    assert not peak["dynamo"]
