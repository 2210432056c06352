"""The BART / mBART / M2M100 variants of ``ModelConfig`` on core's one model: positions read from row 2 of their
table (BART's learned tables, one per side; M2M100's fairseq sinusoids), the embedding LayerNorm, pre-norm stacks
with final norms, the output bias and the forced first output id — the fast path equal to the textbook one, and
every switch and intervention still doing what it says. (Parity with transformers: tests/core/importers.)"""

import dataclasses

import numpy as np
import pytest
import torch
from conftest import tiny_config

from core import FastWeights, InferenceOptions, ModelConfig, Patch, Recorder, ScaleHeads, Transformer
from core.decoding.search import beam_search, greedy
from core.fast.plan import DecoderState
from core.recording.call import Call
from core.transformer.positional import sinusoidal_table

FORCED = 9  # the forced first output id of the families that have one (a target language code)
BART = dict(
    positional="learned",
    position_offset=2,
    separate_positions=True,
    embed_norm=True,
    activation="gelu",
    output_bias=True,
    scale_embedding=False,
    max_positions=40,
)
FAMILIES = {
    "bart": BART,
    "mbart": dict(BART, norm="pre", scale_embedding=True, forced_bos_id=FORCED),
    "m2m100": dict(
        positional="sinusoidal",
        pe_layout="concatenated",
        position_offset=2,
        norm="pre",
        activation="relu",
        forced_bos_id=FORCED,
        pad_position_zero=True,
    ),
}


def family(name: str, seed: int = 0) -> Transformer:
    """A random model of the family with random norms and output bias (1 / 0 would hide a wrong order)."""
    torch.manual_seed(seed)
    model = Transformer(tiny_config(**FAMILIES[name])).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.normal_(1.0, 0.3)
                module.bias.normal_(0.0, 0.3)
        if model.output.bias is not None:
            model.output.bias.normal_(0.0, 0.5)
    return model


def source(seed: int = 0, B: int = 2, Ts: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.randint(4, 64, (B, Ts), generator=torch.Generator().manual_seed(seed))
    keep = torch.ones_like(src, dtype=torch.bool)
    keep[B - 1, Ts - 2 :] = B == 1  # the second sentence, when there is one, is padded
    return src.masked_fill(~keep, 0), keep


def traced(model: Transformer, src, tgt, options=InferenceOptions(), **kwargs):
    recorder = Recorder(model, activations=True, **kwargs)
    with torch.no_grad():
        logits = model(src, tgt, call=Call(options=options, recorder=recorder))
    return logits, recorder.freeze()


def test_the_new_fields_default_to_what_every_earlier_checkpoint_runs_and_validate():
    plain = Transformer(tiny_config())
    assert not any("embed_norm" in k or "tgt_positions" in k for k in plain.state_dict())
    for bad, said in (
        (dict(separate_positions=True), "separate_positions needs learned"),
        (dict(position_offset=-1), "position_offset"),
        (dict(forced_bos_id=2), "forced_bos_id"),  # eos: decoding could not start
        (dict(forced_bos_id=64), "forced_bos_id"),
        (dict(embed_norm="yes"), "embed_norm"),
    ):
        with pytest.raises(ValueError, match=said):
            tiny_config(**bad)
    cfg = tiny_config(**FAMILIES["mbart"])
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


@torch.no_grad()
def test_positions_start_at_row_two_and_each_side_reads_its_own_table():
    model = family("bart")
    src, keep = source()
    tgt = src[:, :5]
    _, trace = traced(model, src, tgt)
    src_table = model.positions.embedding.weight.numpy()
    tgt_table = model.tgt_positions.embedding.weight.numpy()
    assert src_table.shape == (42, 16)  # max_positions + the two rows never read
    np.testing.assert_array_equal(trace.positional_encoding("src"), src_table[2:9])
    np.testing.assert_array_equal(trace.positional_encoding("tgt"), tgt_table[2:7])
    before = model(src, tgt)
    model.positions.embedding.weight[:2] += 5.0  # rows 0 and 1 are never read
    torch.testing.assert_close(model(src, tgt), before)
    model.tgt_positions.embedding.weight[3] += torch.randn(16)  # target position 1 (not a constant: the norm)
    memory = model.encode(src)
    assert not torch.allclose(model(src, tgt), before, atol=1e-4)
    torch.testing.assert_close(model.encode(src), memory)


@torch.no_grad()
def test_m2m100_sinusoids_are_the_concatenated_table_from_row_two():
    model = family("m2m100")
    src, _ = source()
    _, trace = traced(model, src, src[:, :4])
    table = sinusoidal_table(12, 16, "concatenated").numpy()
    np.testing.assert_allclose(trace.positional_encoding("src"), table[2:9], atol=1e-6)
    np.testing.assert_allclose(trace.positional_encoding("tgt"), table[2:6], atol=1e-6)


@torch.no_grad()
def test_the_embedding_norm_is_applied_after_the_positions_and_is_the_recorded_input():
    model = family("bart")
    src, _ = source()
    _, trace = traced(model, src, src[:, :5])
    norm = model.src_embed_norm
    raw = model.src_embed(src[:1]) + model.positions(7)  # BART: scale_embedding off
    expected = torch.layer_norm(raw, (16,), norm.weight, norm.bias, norm.eps)[0]
    np.testing.assert_allclose(trace["embed.src"], expected.numpy(), atol=1e-5)
    _, off = traced(model, src, src[:, :5], InferenceOptions(positional_encoding=False))
    assert np.abs(off.positional_encoding("src")).max() == 0
    unplaced = torch.layer_norm(model.src_embed(src[:1]), (16,), norm.weight, norm.bias, norm.eps)[0]
    np.testing.assert_allclose(off["embed.src"], unplaced.numpy(), atol=1e-5)  # PE off: positions gone, norm kept


@pytest.mark.parametrize("name", FAMILIES)
@torch.no_grad()
def test_the_pre_norm_families_end_each_stack_in_its_final_norm(name):
    model = family(name)
    src, keep = source()
    _, trace = traced(model, src, src[:, :5])
    memory = model.encode(src, keep)
    last = torch.tensor(trace["encoder.1.out"])  # the last layer's output (first sentence)
    if model.config.norm == "pre":
        final = model.encoder_norm
        torch.testing.assert_close(
            memory[0], torch.layer_norm(last, (16,), final.weight, final.bias, final.eps), atol=1e-5, rtol=1e-5
        )
    else:
        torch.testing.assert_close(memory[0], last, atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize(
    "options",
    [
        InferenceOptions(),
        InferenceOptions(positional_encoding=False),
        InferenceOptions(causal_mask=False),
        InferenceOptions(padding_mask=False),
        InferenceOptions(ablate=frozenset({("cross", 1, 0), ("encoder", 0, 1)})),
    ],
    ids=["defaults", "PE off", "causal off", "padding off", "heads off"],
)
def test_the_fast_path_decodes_and_records_what_the_textbook_path_does(name, options):
    model = family(name)
    src, keep = source(1)
    fast = FastWeights(model)
    runs = []
    for weights in (fast, None):
        recorder = Recorder(model, qkv=True, activations=True)
        out = greedy(model, src, keep, Call(options=options, recorder=recorder, fast=weights, max_len=8))
        untraced = greedy(model, src, keep, Call(options=options, fast=weights, max_len=8))
        assert torch.equal(out.tokens, untraced.tokens)
        runs.append((out, recorder.freeze()))
    (a, ta), (b, tb) = runs
    assert torch.equal(a.tokens, b.tokens)
    assert ta.keys() == tb.keys()
    for key in tb.keys():
        if tb.arrays[key].dtype == np.float32:
            np.testing.assert_allclose(ta.arrays[key], tb.arrays[key], rtol=1e-4, atol=1e-4, err_msg=key)
        else:
            np.testing.assert_array_equal(ta.arrays[key], tb.arrays[key], err_msg=key)
    if model.config.forced_bos_id is not None:
        assert a.tokens[:, 1].tolist() == [FORCED, FORCED]  # the first output is the forced one


@pytest.mark.parametrize("name", FAMILIES)
@torch.no_grad()
def test_step_by_step_decoding_gives_the_teacher_forced_logits(name):
    """The cached decoder reads the positions at the right rows (offset + position_offset) at every step."""
    model = family(name)
    src, keep = source(2)
    out = greedy(model, src, keep, Call(fast=FastWeights(model), max_len=6))
    full = model(src, out.tokens[:, :-1], src_keep=keep)  # (B, T, V)
    for step in out.steps:
        chosen = full[:, step.index].softmax(-1)
        torch.testing.assert_close(chosen.topk(3).values, step.top_probs[:, :3], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["mbart", "m2m100"])
@torch.no_grad()
def test_beam_search_forces_the_first_id_at_no_cost_and_drops_impossible_candidates(name):
    model = family(name)
    src, keep = source(3, B=1)
    history = []
    ids = beam_search(model, src, keep, Call(beam_size=4, max_len=8), history=history)
    assert ids[0] == FORCED and len(ids) >= 2
    assert history[0].n_kept == 1 and history[0].candidate_ids.tolist() == [FORCED]  # nothing else was possible
    assert history[1].scores.tolist() == [0.0]  # the forced id added log-probability 0
    assert history[1].n_kept == 4  # then the beam opens
    one = greedy(model, src, keep, Call(max_len=8))
    assert beam_search(model, src, keep, Call(beam_size=1, max_len=8)) == one.tokens[0, 1 : 1 + one.lengths[0]].tolist()


@pytest.mark.parametrize("name", FAMILIES)
def test_head_scaling_and_ablation_agree_on_every_family(name):
    model = family(name)
    src, keep = source(4, B=1)
    tgt = src[:, :5]
    with torch.no_grad():
        base = model(src, tgt)
        rec = Recorder(model, record=False, interventions=[ScaleHeads("decoder.1.cross", heads=(0,))])
        scaled = model(src, tgt, call=Call(recorder=rec))
        ablated = model(src, tgt, call=Call(options=InferenceOptions(ablate=frozenset({("cross", 1, 0)}))))
    assert not torch.allclose(scaled, base, atol=1e-4)
    torch.testing.assert_close(scaled, ablated)


@pytest.mark.parametrize("name", FAMILIES)
def test_patching_and_gradients_work_on_every_family(name):
    """The embedding site (after the positions and the embedding norm) patched from a clean run restores it; the
    gradient kept there is the real one (a small step along it raises the score by about |grad|^2 * eps)."""
    model = family(name)
    clean_src, _ = source(5, B=1)
    tgt = clean_src[:, :4]
    corrupt = clean_src.clone()
    corrupt[0, 2] = (clean_src[0, 2] + 7) % 60 + 4
    rec = Recorder(model, activations=True)
    with torch.no_grad():
        clean = model(clean_src, tgt, call=Call(recorder=rec))
        patch = Patch("embed.src", rec.freeze()["embed.src"], positions=(2,))
        restored = model(corrupt, tgt, call=Call(recorder=Recorder(model, record=False, interventions=[patch])))
        assert not torch.allclose(model(corrupt, tgt), clean, atol=1e-4)
    torch.testing.assert_close(restored, clean, atol=1e-5, rtol=1e-5)
    keep = Recorder(model, record=False, keep_grad=("embed.src",))
    with torch.enable_grad():
        out = model(clean_src, tgt, call=Call(recorder=keep))
        out[0, -1].max().backward()
    grad = keep.leaf("embed.src").grad
    assert grad is not None and grad.abs().sum(-1).gt(0).all()
    leaf, eps = keep.leaf("embed.src").detach(), 1e-3
    with torch.no_grad():
        step = Patch("embed.src", (leaf + eps * grad)[0])
        moved = model(clean_src, tgt, call=Call(recorder=Recorder(model, record=False, interventions=[step])))
    gain = float(moved[0, -1].max() - out[0, -1].max().detach())
    assert gain == pytest.approx(eps * float((grad**2).sum()), rel=0.1)


@torch.no_grad()
def test_m2m100_gives_a_pad_token_no_position_and_its_cached_steps_agree():
    """M2M100's positions skip <pad> (transformers' cached generation gives a <pad> the zero padding row and every
    other token its own index + 2): the pad's input is its embedding alone, the other positions are unchanged."""
    model = family("m2m100")
    cfg = model.config
    src, keep = source(6, B=1)
    tgt = torch.tensor([[cfg.bos_id, 9, cfg.pad_id, 11, 12]])
    _, trace = traced(model, src, tgt)
    embedded = (model.tgt_embed(tgt[0]) * model.embed_scale).numpy()  # (T, D)
    table = sinusoidal_table(12, 16, "concatenated").numpy()
    np.testing.assert_allclose(trace["embed.tgt"][2], embedded[2], atol=1e-6)  # the pad: no position
    np.testing.assert_allclose(trace["embed.tgt"][3], embedded[3] + table[5], atol=1e-5)  # the next: its own
    np.testing.assert_allclose(trace.positional_encoding("tgt"), table[2:7], atol=1e-6)  # the rows, as recorded
    memory = model.encode(src, keep)
    full = model.decode(tgt, memory, None)  # (1, T, V)
    state = DecoderState.empty(cfg.n_decoder_layers)
    fast = Call(fast=FastWeights(model))
    for t in range(tgt.shape[1]):
        step = model.decode(tgt[:, t : t + 1], memory, None, fast, state=state)
        torch.testing.assert_close(step[:, 0], full[:, t], atol=1e-4, rtol=1e-4)
    other = Transformer(dataclasses.replace(cfg, pad_position_zero=False)).eval()  # the same weights, pads placed
    other.load_state_dict(model.state_dict())
    changed = (other.decode(tgt, memory, None) - full).abs().amax(-1)[0]  # (T,)
    assert changed[:2].max() < 1e-6 and changed[2:].min() > 1e-4  # from the pad on (causal), nothing before it
    pe_off = Call(options=InferenceOptions(positional_encoding=False))
    torch.testing.assert_close(other.decode(tgt, memory, None, pe_off), model.decode(tgt, memory, None, pe_off))
