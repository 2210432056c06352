"""Device placement on the paths that only run off the CPU (CUDA), tested without a GPU.

Two stand-ins. The ``meta`` device: PyTorch refuses an op that mixes a meta tensor with a CPU one, so the parts
that need no data (FastWeights, the step plan, encoding, decoding steps, a forward pass) run on a model on
``meta``. And ``PretendCuda``: CPU tensors that say they are on ``cuda:0``, for whole greedy / beam / Bundle calls
(which read values: meta tensors have none). It marks the model's tensors and whatever is made from them, or made
with ``device=`` a CUDA device; it reports an op that mixes a marked tensor with an unmarked CPU one of one or more
dimensions (CUDA refuses those, as it does 0-dim CPU tensors only where they are not scalars), and refuses
``.numpy()`` of a marked tensor, as CUDA does, until ``.cpu()`` / ``.to("cpu")``. Under it the fast path takes its
non-CPU branches: no float16 kernel, column-major copies on the device.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

import core
from core import Bundle, FastWeights, InferenceOptions, Patch, Recorder, ScaleHeads, Transformer
from core.decoding.search import beam_search, greedy
from core.fast.plan import DecoderState, make_plan
from core.recording.call import Call

CUDA = torch.device("cuda", 0)
FACTORIES = {
    torch.tensor,
    torch.as_tensor,
    torch.zeros,
    torch.ones,
    torch.empty,
    torch.full,
    torch.arange,
    torch.eye,
    torch.rand,
    torch.randn,
    torch.randint,
    torch.linspace,
    torch.scalar_tensor,
    torch.empty_strided,
}


class PretendCuda(TorchFunctionMode):
    """CPU tensors that behave, for placement, like tensors on ``cuda:0`` (see the module docstring)."""

    def __init__(self, *modules: torch.nn.Module) -> None:
        super().__init__()
        self._on: weakref.WeakValueDictionary[int, torch.Tensor] = weakref.WeakValueDictionary()
        self.violations: list[str] = []
        for module in modules:
            for t in [*module.parameters(), *module.buffers()]:
                self.mark(t)

    def mark(self, t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            self._on[id(t)] = t
        return t

    def on_device(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and self._on.get(id(t)) is t

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        first = args[0] if args else None
        owner = getattr(func, "__self__", None)  # a property getter: Tensor.device.__get__ and the like
        if self.on_device(first):
            if owner is torch.Tensor.device:
                return CUDA
            if owner is torch.Tensor.is_cpu:
                return False
            if owner is torch.Tensor.is_cuda:
                return True
            if func in (torch.Tensor.numpy, torch.Tensor.__array__):
                raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() first")
        made_here = func in FACTORIES or name.startswith("new_") or name.endswith("_like")
        device = kwargs.get("device")
        if made_here and device is not None and torch.device(device).type == "cuda":
            return self.mark(func(*args, **{**kwargs, "device": "cpu"}))
        if func in (torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda):
            return self._move(func, args, kwargs)
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        marked = [self.on_device(t) for t in tensors]
        out = func(*args, **kwargs)
        if any(marked):
            stray = [tuple(t.shape) for t, m in zip(tensors, marked, strict=True) if not m and t.dim() > 0]
            if stray and func is not torch.Tensor.copy_:  # copy_ between devices is allowed
                self.violations.append(f"{name or func}: CPU tensors of shapes {stray} beside cuda:0 ones")
            tree_map(self.mark, out)
        return out

    def _move(self, func, args, kwargs):  # noqa: ANN001, ANN202
        tensor, rest = args[0], list(args[1:])
        kw = {k: v for k, v in kwargs.items() if k != "device"}
        target = {torch.Tensor.cpu: "cpu", torch.Tensor.cuda: "cuda"}.get(func)
        for a in [*rest, kwargs.get("device")]:
            if isinstance(a, (str, torch.device)):
                target = torch.device(a).type
            elif isinstance(a, torch.Tensor):
                target = "cuda" if self.on_device(a) else "cpu"
        rest = [a for a in rest if not isinstance(a, (str, torch.device))]
        out = tensor.to(*rest, **kw) if func is torch.Tensor.to and (rest or kw) else tensor
        if out is tensor:
            out = tensor.view_as(tensor)  # a new tensor object, so that its mark is its own
        return self.mark(out) if target == "cuda" else out if target == "cpu" else self._same(tensor, out)

    def _same(self, tensor: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return self.mark(out) if self.on_device(tensor) else out


def _model(decoder_self: str = "attention", seed: int = 3) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(tiny_config(decoder_self=decoder_self, tie_output=False)).eval()
    with torch.no_grad():
        model.output.weight.mul_(8.0)
        for p in model.parameters():
            p.copy_(p.half().float())  # float16 numbers: on the CPU the kernel would take them
    return model


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.randint(4, 64, (3, 7), generator=torch.Generator().manual_seed(5))
    keep = torch.ones_like(src, dtype=torch.bool)
    keep[1, 5:] = False
    src[~keep] = 0
    return src, keep


def _same_arrays(got: core.Trace, want: core.Trace) -> None:
    assert got.keys() == want.keys()
    for name in want.keys():
        a, b = got.arrays[name], want.arrays[name]
        assert type(a) is np.ndarray, name  # numpy on the CPU, whatever the model's device
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=name)


def test_the_pretend_device_refuses_what_cuda_refuses():
    mode = PretendCuda()
    with mode:
        x = torch.ones(3, device="cuda")
        assert x.device == CUDA and x.is_cuda and not x.is_cpu
        assert (x * 2).device == CUDA and x.new_zeros(2).device == CUDA and torch.zeros_like(x).device == CUDA
        assert mode.violations == []
        _ = x + torch.ones(3)  # made on the CPU (no device=): CUDA would refuse the sum
        assert len(mode.violations) == 1 and "add" in mode.violations[0]
        _ = x + torch.tensor(2.0)  # a 0-dim CPU tensor is a scalar to CUDA ops too
        assert len(mode.violations) == 1
        with pytest.raises(TypeError, match="cpu"):
            x.numpy()
        assert x.to("cpu").device.type == "cpu" and x.cpu().numpy().tolist() == [1.0, 1.0, 1.0]
        assert torch.ones(2).to(x.device).device == CUDA


@pytest.mark.parametrize("decoder_self", ["attention", "ssru"])
@pytest.mark.parametrize("fast", [True, False], ids=["fast", "reference"])
def test_greedy_and_beam_search_on_a_cuda_model_stay_on_it_and_equal_the_cpu_run(decoder_self, fast, monkeypatch):
    calls = {"n": 0}
    kernel = torch.fbgemm_linear_fp16_weight

    def counting(*args: Any) -> torch.Tensor:
        calls["n"] += 1
        return kernel(*args)

    monkeypatch.setattr(torch, "fbgemm_linear_fp16_weight", counting)
    model, (src, keep) = _model(decoder_self), _batch()
    heads_off = (("cross", 1, 0),) + ((("decoder", 0, 1),) if decoder_self == "attention" else ())
    runs = {}
    for device in ("cpu", "cuda"):
        mode = PretendCuda(model) if device == "cuda" else PretendCuda()  # the CPU run: nothing marked
        calls["n"] = 0
        with mode, torch.no_grad():
            s, k = src.to(device), keep.to(device)
            fw = FastWeights(model) if fast else None
            rec = Recorder(
                model,
                qkv=True,
                activations=True,
                interventions=[
                    ScaleHeads("decoder.0.cross", (1,), 0.5),
                    Patch("decoder.0.out", np.zeros((2, 16)), (1,)),
                ],
            )
            opts = InferenceOptions(ablate=heads_off)
            out = greedy(model, s, k, call=Call(options=opts, recorder=rec, fast=fw, max_len=6))
            assert out.tokens.device.type == device
            plain = greedy(model, s, k, call=Call(options=InferenceOptions(), fast=fw, max_len=6))
            beam = beam_search(
                model, s[:1], k[:1], call=Call(options=InferenceOptions(), fast=fw, max_len=6, beam_size=3)
            )
            runs[device] = (out.tokens.cpu(), plain.tokens.cpu(), beam, rec.freeze())
            if device == "cuda":
                assert mode.violations == [], mode.violations[:5]
                assert calls["n"] == 0  # the float16 kernel is CPU only: F.linear on the device
            else:
                assert calls["n"] > 0 or not fast
    cpu, cuda = runs["cpu"], runs["cuda"]
    assert torch.equal(cpu[0], cuda[0]) and torch.equal(cpu[1], cuda[1]) and cpu[2] == cuda[2]
    _same_arrays(cuda[3], cpu[3])


@pytest.mark.parametrize("decoder_self", ["attention", "ssru"])
@torch.no_grad()
def test_fast_weights_and_the_step_plan_of_a_cuda_model_live_on_its_device(decoder_self):
    model = _model(decoder_self)
    mode = PretendCuda(model)
    with mode:
        fw = FastWeights(model)
        plan = make_plan(model, fw, 2)
    assert plan is not None and mode.violations == []
    tensors = [plan.zeros, *plan.output[1:]]
    for lp in plan.layers:
        for linear in lp.linears():
            assert linear[0] in (F.linear, fw.linear)  # not the CPU kernel (the memory's keys and values: as a call)
            tensors += linear[1:]
        for norm in lp.norms():
            tensors += norm[:2]
    fused = fw.fused_qkv if decoder_self == "attention" else fw.fused_ssru
    tensors += [t for pair in fused.values() for t in pair]
    assert all(mode.on_device(t) for t in tensors if t is not None)


def test_a_bundle_on_cuda_returns_cpu_numpy_traces_equal_to_the_cpu_bundle_s(tiny_checkpoint):
    cpu = core.load(tiny_checkpoint, device="cpu")
    model, _, _ = core.load_checkpoint(tiny_checkpoint, "cpu")
    mode = PretendCuda(model)
    with mode:
        on_cuda = Bundle(model, cpu.tokenizer, cpu.info, tiny_checkpoint)
        assert on_cuda.device == CUDA
        calls = {
            "greedy": lambda b: b.translate("the cat sat", max_len=5, record=core.Record(activations=True)).trace,
            "beam": lambda b: b.translate("the cat sat", beam_size=3, max_len=5).trace,
            "forced": lambda b: b.teacher_forced("the cat sat", "the cat").trace,
            "batch": lambda b: b.translate_batch(["the cat", "a dog sat on the mat"], max_len=5)[1].trace,
            "prefix": lambda b: b.translate_from("the cat sat", [5], max_len=5).trace,
        }
        traces = {name: call(on_cuda) for name, call in calls.items()}
        tree = on_cuda.beam_tree("the cat sat", beam_size=3, max_len=5)
    assert mode.violations == [], mode.violations[:5]
    for name, call in calls.items():
        _same_arrays(traces[name], call(cpu))
    want = cpu.beam_tree("the cat sat", beam_size=3, max_len=5)
    assert tree.output_ids == want.output_ids and len(tree.steps) == len(want.steps)
    for a, b in zip(tree.steps, want.steps, strict=True):
        assert type(a.cross_attention) is np.ndarray and type(a.scores) is np.ndarray
        np.testing.assert_allclose(a.cross_attention, b.cross_attention, rtol=1e-5, atol=1e-6)


def test_the_shortlist_on_cuda_stays_on_the_device_and_equals_the_cpu_run(tiny_checkpoint, tmp_path):
    """The shortlist's rows (``vocab``), the columns of forced and suppressed ids and the gathered output rows live
    on the model's device: every Bundle call with ``InferenceOptions(shortlist=True)`` under the pretend device,
    on a model that suppresses an id of the shortlist (as Marian models suppress <pad>)."""
    import dataclasses

    from marian_folders import write_marian_shortlist

    from core.decoding.shortlist import Shortlist

    cpu_plain = core.load(tiny_checkpoint, device="cpu")
    V = cpu_plain.config.tgt_vocab_size
    lex = write_marian_shortlist(tmp_path / "lex.bin", 4, 3, [[(7 * w + j) % V for j in range(3)] for w in range(V)])
    shortlist = Shortlist.from_marian(lex, V, shared=True)
    suppressing = Transformer(dataclasses.replace(cpu_plain.config, suppress_ids=(1,))).eval()  # id 1: frequent
    suppressing.load_state_dict(cpu_plain.model.state_dict())
    cpu = Bundle(suppressing, cpu_plain.tokenizer, cpu_plain.info, tiny_checkpoint, shortlist=shortlist)
    sl = core.InferenceOptions(shortlist=True)
    outside = next(i for i in range(4, V) if i not in shortlist.rows(cpu.encode_source("the cat sat")[0]))
    model = Transformer(suppressing.config).eval()
    model.load_state_dict(suppressing.state_dict())
    mode = PretendCuda(model)
    with mode:
        on_cuda = Bundle(model, cpu.tokenizer, cpu.info, tiny_checkpoint, shortlist=shortlist)
        calls = {
            "greedy": lambda b: b.translate("the cat sat", sl, max_len=5).trace,
            "beam": lambda b: b.translate("the cat sat", sl, beam_size=3, max_len=5).trace,
            "forced": lambda b: b.teacher_forced("the cat sat", "the cat", sl).trace,
            "batch": lambda b: b.translate_batch(["the cat", "a dog sat on the mat"], sl, max_len=5)[1].trace,
            "prefix": lambda b: b.translate_from("the cat sat", [outside], sl, max_len=5).trace,
        }
        traces = {name: call(on_cuda) for name, call in calls.items()}
    assert mode.violations == [], mode.violations[:5]
    for name, call in calls.items():
        _same_arrays(traces[name], call(cpu))
        assert traces[name].meta["shortlist_rows"] < V


@pytest.mark.parametrize("decoder_self", ["attention", "ssru"])
@torch.no_grad()
def test_a_model_on_the_meta_device_encodes_and_decodes_on_it(decoder_self):
    """Meta tensors refuse any op with a CPU tensor: every tensor the fast path and the plan make must be made
    where the model is. (Values are needed to choose tokens, so decoding runs step by step here.)"""
    with torch.device("meta"):
        model = Transformer(tiny_config(decoder_self=decoder_self)).eval()
    fw = FastWeights(model)
    plan = make_plan(model, fw, 2)
    assert plan is not None and plan.zeros.is_meta and plan.output[1].is_meta
    src = torch.randint(4, 64, (2, 7), device="meta")
    opts = InferenceOptions(padding_mask=False)  # the padding check reads values
    memory = model.encode(src, call=Call(options=opts, fast=fw))
    state = DecoderState.empty(2)
    for _ in range(3):
        logits = model.decode(
            torch.zeros(2, 1, dtype=torch.long, device="meta"),
            memory,
            None,
            call=Call(options=opts, fast=fw),
            state=state,
        )
        assert logits.is_meta and logits.shape == (2, 1, 64)
    assert state.plan is not None and state.plan[2] is not None  # the steps ran on the plan
    for layer in state.layers:
        assert all(t.is_meta for t in (layer.self_k, layer.self_v, layer.ssru_cell, *layer.cross_kv) if t is not None)
    assert model(src, torch.zeros(2, 4, dtype=torch.long, device="meta"), call=Call(options=opts, fast=fw)).is_meta


def test_the_analyses_on_cuda_stay_on_the_device_and_equal_the_cpu_run(tiny_checkpoint):
    """What "Why this word?" and the heads page call, on a model on the device: head importance (measured and
    estimated), activation patching, attribution (gradients), re-recording a translation, the gold pairs'
    cross-attention. None may mix a device tensor with a CPU one; each equals the CPU bundle's result. The model
    suppresses an id (as Marian models suppress <pad>: head importance's changed-output check reads them), and the
    explained output is a real target ending in eos (the tiny random model's own greedy output is <s> repeated)."""
    import dataclasses

    from core.analysis import head_importance, head_importance_estimate
    from core.analysis.attribution import attribute
    from core.analysis.patching import activation_patching
    from core.analysis.survey import gold_cross_attention

    plain = core.load(tiny_checkpoint, device="cpu")
    suppressing = Transformer(dataclasses.replace(plain.config, suppress_ids=(1,))).eval()
    suppressing.load_state_dict(plain.model.state_dict())
    cpu = Bundle(suppressing, plain.tokenizer, plain.info, tiny_checkpoint)
    src_ids = cpu.encode_source("the cat sat on the mat")[0]
    out_ids = cpu.encode_target("the cat sat")  # eos appended
    corrupt = [src_ids[0] + 1, *src_ids[1:]]
    pairs = [("the cat sat", "the cat"), ("a dog sat on the mat", "a dog")]
    options = InferenceOptions(ablate=frozenset({("cross", 0, 1)}))  # a switch in effect, as the page passes it

    def run(b: Bundle) -> dict[str, Any]:
        return {
            "exact": head_importance(b, src_ids, out_ids, options=options),
            "estimate": head_importance_estimate(b, src_ids, out_ids, options=options),
            "patching": activation_patching(b, src_ids, corrupt, out_ids, options=options),
            "attribution": attribute(b, src_ids, out_ids, 1, steps=4, options=options),
            "more": b.record_more(b.translate("the cat sat on the mat", max_len=6)).trace,
            "gold": gold_cross_attention(b, pairs)[0],
        }

    model = Transformer(suppressing.config).eval()
    model.load_state_dict(suppressing.state_dict())
    mode = PretendCuda(model)
    with mode:
        got = run(Bundle(model, cpu.tokenizer, cpu.info, tiny_checkpoint))
    assert mode.violations == [], mode.violations[:5]
    want = run(cpu)
    for name in ("exact", "estimate"):
        a, b = got[name], want[name]
        assert (a.n_tokens, a.exact) == (b.n_tokens, b.exact) and a.base_logprob == pytest.approx(b.base_logprob)
        assert [(e.kind, e.layer, e.head, e.output_changed, e.first_change) for e in a.effects] == [
            (e.kind, e.layer, e.head, e.output_changed, e.first_change) for e in b.effects
        ], name
        np.testing.assert_allclose(
            [e.delta_logprob for e in a.effects], [e.delta_logprob for e in b.effects], rtol=1e-4, atol=1e-5
        )
    for name in ("patching", "attribution"):
        for field, value in vars(want[name]).items():
            if isinstance(value, np.ndarray):
                assert type(getattr(got[name], field)) is np.ndarray, (name, field)
                np.testing.assert_allclose(getattr(got[name], field), value, rtol=1e-4, atol=1e-5, err_msg=field)
            elif isinstance(value, float):
                assert getattr(got[name], field) == pytest.approx(value, rel=1e-4, abs=1e-5), (name, field)
            else:
                assert getattr(got[name], field) == value, (name, field)
    _same_arrays(got["more"], want["more"])
    for a, b in zip(got["gold"], want["gold"], strict=True):
        assert type(a) is np.ndarray
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
