"""Weights from a safetensors file into a model, with one copy in memory.

safetensors maps its file into memory: a tensor from ``load_file`` is read from the file only where it is touched,
and the pages read stay until the file's mapping (one per ``safe_open``) goes. So these steps keep one copy of
the weights:

    read_safetensors(path)              every tensor checked one at a time (floating point, finite), dropped, and
                                        the file mapped again: {name: tensor} whose bytes are not read yet
    empty_model(cfg)                    the model with no parameter allocated (the meta device); its fixed
                                        sinusoid tables, made from the config, real
    assign_weights(model, state, where) the tensors become the model's parameters (``load_state_dict(assign=True)``:
                                        no copy), its tied parameters tied again
    parameter_shapes(cfg)               a config's parameter shapes, nothing allocated

``load_state_dict`` into a freshly built model would hold the file's pages and the model's own random parameters
(and, while it is built, an untied output matrix the size of the embeddings): two copies and more. Here the
parameters read the file's pages (a private mapping: a write copies the page); checkpoint writers never change a
file in place (they write a new one and rename it), so those pages stay the loaded weights.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch.overrides import TorchFunctionMode

from ..config import ModelConfig
from ..errors import CheckpointError
from ..transformer.model import Transformer, make_positions
from .progress import Progress


def check_tensor(path: Path, name: str, tensor: torch.Tensor) -> None:
    """CheckpointError unless ``tensor`` holds finite floating-point values."""
    if not tensor.is_floating_point():
        raise CheckpointError(f"{path}: tensor {name} holds {tensor.dtype} values; weights are floating point")
    if tensor.numel() == 0:
        return
    low, high = (float(v) for v in torch.aminmax(tensor))  # one pass, nothing allocated (isfinite makes 1.5x)
    if not (math.isfinite(low) and math.isfinite(high)):  # NaN or an infinity anywhere shows in one of them
        raise CheckpointError(f"{path}: tensor {name} holds NaN or infinite values; the weights are broken")


def read_safetensors(path: Path, progress: Progress | None = None) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file ``path``, each checked (``check_tensor``) with one tensor read at a time,
    returned as fresh mappings of the file (nothing read until used). CheckpointError when the file cannot be read.
    progress: told after each tensor is checked (i / n of them)."""
    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            names = list(handle.keys())
        for i, name in enumerate(names, 1):  # a handle maps the whole file and keeps what was read: one per tensor
            with safe_open(str(path), framework="pt", device="cpu") as handle:
                check_tensor(path, name, handle.get_tensor(name))
            if progress is not None:
                progress(i / len(names), f"Read and checked tensor {i} of {len(names)} ({name})")
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot be read ({exc}); the file is truncated or corrupt") from None


class _NoNormalOnMeta(TorchFunctionMode):
    """Skips ``normal_`` (``nn.init.normal_`` and the tensor method) on a meta tensor, where it fills nothing: the
    first one run there imports ``torch._dynamo`` (torch's meta ``normal_`` is a Python reference wrapped to disable
    Dynamo), 2.4 s of every process that loads a checkpoint (``nn.Embedding`` initialises its weight so). Function
    modes are per thread: nothing changes for another thread building a real model meanwhile."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.nn.init.normal_, torch.Tensor.normal_):
            tensor = args[0] if args else kwargs.get("tensor")  # nn.init passes it by name
            if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                return tensor
        return func(*args, **kwargs)


def _on_meta(cfg: ModelConfig) -> Transformer:
    with torch.device("meta"), _NoNormalOnMeta():
        return Transformer(cfg)


def empty_model(cfg: ModelConfig) -> Transformer:
    """``Transformer(cfg)`` with its parameters on the meta device (no memory), to be given by ``assign_weights``;
    its positional modules are built for real (their sinusoid tables are non-persistent buffers made from the config,
    never read from a file)."""
    model = _on_meta(cfg)
    model.positions = make_positions(cfg)
    if model.tgt_positions is not None:
        model.tgt_positions = make_positions(cfg)
    return model


def parameter_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor in the state dict of ``Transformer(cfg)``, aliases included; nothing allocated."""
    model = _on_meta(cfg)
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


def assign_weights(model: Transformer, state: Mapping[str, torch.Tensor], where: Path) -> Transformer:
    """Make ``state``'s tensors ``model``'s parameters without copying them (cast to the parameter's dtype when it
    differs). A tied parameter (``Transformer.tied_aliases``) may be given under any of its names; as with
    ``load_state_dict``, the last one in the model's order wins, and the model's ties are kept. CheckpointError naming
    ``where`` for a missing, unexpected or misshapen tensor. Returns ``model``."""
    aliases = model.tied_aliases()  # alias -> canonical name, read before any parameter is replaced
    own = model.state_dict()
    unexpected = sorted(set(state) - set(own))
    chosen: dict[str, torch.Tensor] = {}
    for name in own:  # the model's order: a later alias overrides, as load_state_dict's copies do
        if name in state:
            chosen[aliases.get(name, name)] = state[name]
    missing = sorted(set(own) - set(aliases) - set(chosen))
    if missing or unexpected:
        raise CheckpointError(
            f"{where}: does not match the model: missing tensors {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected tensors {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}"
        )
    for name, tensor in chosen.items():
        if tuple(tensor.shape) != tuple(own[name].shape):
            raise CheckpointError(
                f"{where}: tensor {name} has shape {tuple(tensor.shape)}, the model's is {tuple(own[name].shape)}"
            )
        chosen[name] = tensor.to(own[name].dtype).contiguous()  # no copy when it already is
    del own  # the freshly built parameters go as they are replaced
    model.load_state_dict(chosen, strict=False, assign=True)
    for alias, canonical in aliases.items():
        owner, _, attribute = alias.rpartition(".")
        setattr(model.get_submodule(owner), attribute, model.get_parameter(canonical))
    unmade = [name for name, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    if unmade:  # a module holding a non-persistent buffer that empty_model does not build
        raise CheckpointError(f"{where}: the model's {unmade[:3]} were never given a value")
    return model
