"""ALTI+ contributions: distributions per layer, hand-built models with known answers, the decomposition against the
recorded layer outputs, a brute-force computation of the paper's formula, real checkpoints, switches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import build_tiny_checkpoint

import core
from core import InferenceOptions
from core.analysis.alti import fold_norm
from core.analysis.contributions import Contributions, contributions
from core.analysis.decomposition import decompose, recorded_pass
from core.analysis.value_norms import value_norms
from core.errors import InputError

ROOT = Path(__file__).resolve().parents[3]
TEXT = "The cat sleeps on the warm chair."
SWITCHES = {
    "as trained": InferenceOptions(),
    "PE off": InferenceOptions(positional_encoding=False),
    "causal mask off": InferenceOptions(causal_mask=False),
    "padding mask off": InferenceOptions(padding_mask=False),
    "heads off": InferenceOptions(ablate=frozenset({("encoder", 0, 1), ("cross", 1, 0)})),
}


@pytest.fixture(scope="module", params=["post", "pre", "ssru"])
def bundle(request, tmp_path_factory):
    extra = {"decoder_self": "ssru"} if request.param == "ssru" else {"norm": request.param}
    return core.load(build_tiny_checkpoint(tmp_path_factory.mktemp(request.param) / "m", **extra), device="cpu")


def rebuilt(bundle: core.Bundle, change) -> core.Bundle:
    """A new bundle on a copy of ``bundle``'s model with ``change`` applied to its weights (its fast weights made
    again: a Bundle's are a snapshot)."""
    model = core.Transformer(bundle.config).eval()
    model.load_state_dict(bundle.model.state_dict())
    with torch.no_grad():
        change(model)
    return core.Bundle(model, bundle.tokenizer, bundle.info)


def assert_distributions(m: np.ndarray) -> None:
    assert (m >= 0).all()
    np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-9)


@pytest.mark.parametrize("switch", list(SWITCHES))
def test_every_layer_gives_distributions_under_every_switch(bundle, switch):
    c = contributions(bundle, TEXT, options=SWITCHES[switch])
    S, T = len(c.source_pieces), len(c.target_pieces)
    assert c.matrix.shape == (T, S + T) and len(c.prefix_pieces) == T and c.options == SWITCHES[switch]
    for m in (c.encoder_layers, c.encoder, c.self_layers, c.cross_layers, c.layers, c.matrix):
        assert_distributions(m)
    np.testing.assert_allclose(c.token_source_share, c.matrix[:, :S].sum(-1))
    assert c.source_share == pytest.approx(c.token_source_share.mean())
    assert 0 < c.source_share < 1 and c.reconstruction_error < 1e-5
    assert not c.forced  # the greedy translation: no output token takes from a later decoder input, mask or not
    assert np.triu(c.prefix_matrix, 1).max() == 0
    assert c.layers[-1] is not c.matrix and np.array_equal(c.layers[-1], c.matrix)


def test_greedy_pieces_and_logprobs_are_the_translations(bundle):
    out = bundle.translate(TEXT)
    c = contributions(bundle, TEXT)
    assert list(c.target_pieces) == out.output_tokens and list(c.prefix_pieces) == out.tgt_tokens
    assert list(c.source_pieces) == out.src_tokens and not c.forced
    np.testing.assert_allclose(c.token_logprob, np.log(out.trace["output.probs"]), atol=1e-4)


def test_a_given_translation_is_teacher_forced(bundle):
    c = contributions(bundle, TEXT, translation="Le chat dort.")
    forced = bundle.teacher_forced(TEXT, "Le chat dort.")
    assert c.forced and list(c.target_pieces) == forced.output_tokens
    np.testing.assert_allclose(c.token_logprob, np.log(forced.trace["output.probs"]), atol=1e-4)
    with pytest.raises(InputError, match="empty"):
        contributions(bundle, TEXT, translation="   ")
    with pytest.raises(InputError, match="translation must be text"):
        contributions(bundle, TEXT, translation=3)  # type: ignore[arg-type]
    long = " ".join([TEXT] * 40)  # beyond the model's source limit
    with pytest.raises(InputError, match="tokens long; the limit is"):
        contributions(bundle, long)
    cut = contributions(bundle, long, truncate=True, translation="Le chat.")
    assert len(cut.source_pieces) == bundle.max_source_tokens  # cut as translate cuts it, eos appended


def test_causal_mask_off_greedy_sees_only_its_prefix_forced_sees_all(bundle):
    off = InferenceOptions(causal_mask=False)
    greedy = contributions(bundle, TEXT, options=off)
    assert np.triu(greedy.prefix_matrix, 1).max() == 0 and any("Causal mask off" in n for n in greedy.notes)
    forced = contributions(bundle, TEXT, translation="Le chat dort sur la chaise.", options=off)
    later = np.triu(forced.prefix_matrix, 1).max()
    if bundle.config.decoder_self == "ssru":
        assert later == 0  # the recurrence reads only what came before, whatever the mask
    else:
        assert later > 0  # one pass: earlier tokens take from later ones


def test_cross_attention_zeroed_leaves_no_source(bundle):
    def zero_cross(model):
        for layer in model.decoder_layers:
            layer.cross_attn.out_proj.weight.zero_()
            layer.cross_attn.out_proj.bias.zero_()

    c = contributions(rebuilt(bundle, zero_cross), TEXT)
    assert c.source_share == 0 and (c.token_source_share == 0).all()
    assert (c.cross_layers[..., :-1] == 0).all()  # every cross-attention row: all of it from the residual
    assert_distributions(c.prefix_matrix)


def test_every_cross_head_switched_off_leaves_no_source(bundle):
    cfg = bundle.config
    off = frozenset(("cross", layer, h) for layer in range(cfg.n_decoder_layers) for h in range(cfg.n_heads))
    c = contributions(bundle, TEXT, options=InferenceOptions(ablate=off))
    assert c.source_share == 0 and c.reconstruction_error < 1e-5
    assert contributions(bundle, TEXT).source_share > 0


def test_decoder_self_block_zeroed_leaves_each_token_its_own_input(bundle):
    """Self-attention's output projection (or the SSRU cell's W) zeroed: the prefix reaches a token only through its
    own residual."""

    def zero_self(model):
        for layer in model.decoder_layers:
            if layer.ssru is not None:
                layer.ssru.W.weight.zero_()
            else:
                layer.self_attn.out_proj.weight.zero_()
                layer.self_attn.out_proj.bias.zero_()

    c = contributions(rebuilt(bundle, zero_self), TEXT)
    T = len(c.target_pieces)
    np.testing.assert_allclose(c.self_layers, np.broadcast_to(np.eye(T), c.self_layers.shape), atol=1e-12)
    prefix = c.prefix_matrix
    assert (prefix - np.diag(np.diag(prefix)) == 0).all()  # from the residual only: each token's own input
    np.testing.assert_allclose(np.diag(prefix), 1 - c.token_source_share, atol=1e-9)
    assert c.source_share < 1


def _ffn(layer, y: torch.Tensor, pre: bool) -> torch.Tensor:
    """The layer's feed-forward half, from its modules: norm(y + ffn(y)) post-norm, y + ffn(norm(y)) pre-norm."""
    if pre:
        return y + layer.ffn(layer.ffn_norm(y))
    return layer.ffn_norm(y + layer.ffn(y))


@pytest.mark.parametrize("switch", ["as trained", "heads off"])
def test_the_decomposition_adds_up_to_the_recorded_layer_outputs(bundle, switch):
    assert_adds_up(bundle, SWITCHES[switch])


def assert_adds_up(bundle: core.Bundle, options: InferenceOptions) -> None:
    """Each block's vectors add up to its output and, through the layer's feed-forward half, to the recorded
    layer output within 1e-5."""
    model, pre = bundle.model, bundle.config.norm == "pre"
    src = bundle.encode_source(TEXT)[0]
    out = [int(i) for i in bundle.translate(TEXT).trace["output.ids"]]
    trace, _ = recorded_pass(bundle, src, out, options)
    blocks = decompose(model, trace)
    with torch.no_grad():
        for layer, enc in enumerate(model.encoder_layers):
            y = blocks[("encoder", layer)].block.output.float()
            np.testing.assert_allclose(_ffn(enc, y, pre).numpy(), trace[f"encoder.{layer}.out"], atol=1e-5)
        for layer, dec in enumerate(model.decoder_layers):
            self_block = blocks[("decoder", layer)]
            np.testing.assert_allclose(self_block.block.output, self_block.actual, atol=1e-5)
            y = blocks[("cross", layer)].block.output.float()
            np.testing.assert_allclose(_ffn(dec, y, pre).numpy(), trace[f"decoder.{layer}.out"], atol=1e-5)


FAMILIES = {  # the T5 and BART variants the importers open, as tiny random models
    "t5": dict(
        norm="pre",
        norm_kind="rms",
        d_kv=4,
        attention_scale=False,
        gated_ffn=True,
        linear_bias=False,
        positional="relative",
        activation="gelu_new",
    ),
    "bart": dict(embed_norm=True, positional="learned", separate_positions=True, position_offset=2, activation="gelu"),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_t5_and_bart_variants(family, tmp_path):
    b = core.load(build_tiny_checkpoint(tmp_path / family, **FAMILIES[family]), device="cpu")
    for switch in ("as trained", "heads off", "PE off"):
        c = contributions(b, TEXT, options=SWITCHES[switch])
        for m in (c.encoder_layers, c.self_layers, c.cross_layers, c.layers):
            assert_distributions(m)
        assert c.reconstruction_error < 1e-5
    assert_adds_up(b, SWITCHES["heads off"])


@pytest.mark.parametrize("norm", [torch.nn.LayerNorm(8, eps=1e-5), torch.nn.RMSNorm(8, eps=1e-6)])
def test_a_folded_norm_adds_up_to_the_norm_of_the_sum(norm):
    torch.manual_seed(1)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        if getattr(norm, "bias", None) is not None:
            norm.bias.uniform_(-1, 1)
    vectors, constant = torch.randn(3, 5, 8, dtype=torch.float64), torch.randn(3, 8, dtype=torch.float64)
    folded = fold_norm(norm, vectors, constant)
    with torch.no_grad():
        expected = norm.double()(vectors.sum(1) + constant)
    torch.testing.assert_close(folded.output, expected)
    centred = isinstance(norm, torch.nn.LayerNorm)  # LayerNorm centres every vector; RMSNorm does not
    unweighted = folded.vectors / norm.weight.detach()
    assert torch.allclose(unweighted.mean(-1), torch.zeros(3, 5, dtype=torch.float64)) == centred
    with pytest.raises(ValueError, match="folds a LayerNorm or an RMSNorm in, not a Identity"):
        fold_norm(torch.nn.Identity(), vectors, constant)


# ---- brute force: the paper's formula, one token pair at a time, from the model's own weights ----


def _layer_norm(v: np.ndarray, total: np.ndarray, norm) -> np.ndarray:
    """LayerNorm of ``total`` applied to the part ``v`` with total's scale (ALTI's linear fold), bias left out."""
    sigma = np.sqrt(((total - total.mean()) ** 2).mean() + norm.eps)
    return (v - v.mean()) / sigma * norm.weight.detach().double().numpy()


def _brute_block(x_q, x_kv, weights, attn, norm, own: bool, pre: bool, kv_norm) -> np.ndarray:
    """c_ij for one attention block: T_i(x_j) = sum_h a_hij (x_j Wv_h + bv_h) Wo_h (+ x_i), y_i = N(sum_j T_i(x_j) +
    b_o), c_ij = max(0, |y_i|_1 - |y_i - T_i(x_j)|_1) / sum. ``own``: the residual is x_j = x_i (self-attention);
    else one more vector (cross-attention)."""
    H = weights.shape[0]
    D = x_q.shape[1]
    dv = D // H
    Wv, bv = attn.v_proj.weight.detach().double().numpy(), attn.v_proj.bias.detach().double().numpy()
    Wo, bo = attn.out_proj.weight.detach().double().numpy(), attn.out_proj.bias.detach().double().numpy()
    Tq, Tk = weights.shape[1], weights.shape[2]
    rows = []
    for i in range(Tq):
        vectors = []
        for j in range(Tk):
            x_j = x_kv[j] if kv_norm is None else kv_norm(x_kv[j])
            t = np.zeros(D)
            for h in range(H):
                sl = slice(h * dv, (h + 1) * dv)
                t += weights[h, i, j] * ((Wv[sl] @ x_j + bv[sl]) @ Wo[:, sl].T)
            if own and i == j:
                t += x_q[i]
            vectors.append(t)
        if not own:
            vectors.append(x_q[i].copy())
        total = sum(vectors) + bo
        if pre:
            y = total
        else:
            vectors = [_layer_norm(v, total, norm) for v in vectors]
            y = _layer_norm(total, total, norm) + norm.bias.detach().double().numpy()
        rows.append(_alti_row(vectors, y))
    return np.array(rows)


def _alti_row(vectors: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    scores = [max(0.0, np.abs(y).sum() - np.abs(y - v).sum()) for v in vectors]
    return np.array(scores) / sum(scores)


def test_brute_force_agrees(tmp_path):
    for norm in ("post", "pre"):
        b = core.load(build_tiny_checkpoint(tmp_path / norm / "m", seed=3, norm=norm), device="cpu")
        pre = norm == "pre"
        c = contributions(b, "The cat sleeps.")
        src = b.encode_source("The cat sleeps.")[0]
        out = [int(i) for i in b.translate("The cat sleeps.").trace["output.ids"]]
        trace, _ = recorded_pass(b, src, out, InferenceOptions())
        model = b.model

        def kv_norm_of(norm_module, pre=pre):  # pre-norm: the values read the norm of each token
            if not pre:
                return None
            return lambda v: norm_module(torch.tensor(v, dtype=torch.float32)).detach().double().numpy()

        enc = []
        for layer, m in enumerate(model.encoder_layers):
            x = np.array(trace["embed.src" if layer == 0 else f"encoder.{layer - 1}.out"], dtype=np.float64)
            w = trace.attention("encoder", layer)
            enc.append(_brute_block(x, x, w, m.self_attn, m.self_attn_norm, True, pre, kv_norm_of(m.self_attn_norm)))
        np.testing.assert_allclose(c.encoder_layers, enc, atol=1e-6)
        rollout = enc[0]
        for layer_c in enc[1:]:  # R_l[i, k] = sum_j C_l[i, j] R_{l-1}[j, k]
            rollout = np.array([[sum(layer_c[i, j] * rollout[j, k] for j in range(len(x))) for k in range(len(x))]
                                for i in range(len(x))])  # fmt: skip
        np.testing.assert_allclose(c.encoder, rollout, atol=1e-6)

        memory = np.array(trace[f"encoder.{len(enc) - 1}.out"], dtype=np.float64)
        S, T = memory.shape[0], len(out)
        total = None
        for layer, m in enumerate(model.decoder_layers):
            x = np.array(trace["embed.tgt" if layer == 0 else f"decoder.{layer - 1}.out"], dtype=np.float64)
            self_c = _brute_block(
                x, x, trace.attention("decoder", layer), m.self_attn, m.self_attn_norm, True, pre,
                kv_norm_of(m.self_attn_norm),
            )  # fmt: skip
            h = decompose(model, trace)[("decoder", layer)].actual.numpy()  # the self block's output
            cross_c = _brute_block(
                h, memory, trace.attention("cross", layer), m.cross_attn, m.cross_attn_norm, False, pre,
                kv_norm_of(m.cross_attn_norm) if pre else None,
            )  # fmt: skip
            np.testing.assert_allclose(c.self_layers[layer], self_c, atol=1e-6)
            np.testing.assert_allclose(c.cross_layers[layer], cross_c, atol=1e-6)
            # the layer: sources through the encoder; the residual's share spread over the prefix by self-attention
            own = np.zeros((T, S + T))
            for i in range(T):
                for k in range(S):
                    own[i, k] = sum(cross_c[i, j] * rollout[j, k] for j in range(S))
                for k in range(T):
                    own[i, S + k] = cross_c[i, S] * self_c[i, k]
            if total is None:
                total = own
            else:
                new = np.zeros_like(own)
                for i in range(T):
                    for k in range(S):
                        new[i, k] = own[i, k] + sum(own[i, S + j] * total[j, k] for j in range(T))
                    for k in range(T):
                        new[i, S + k] = sum(own[i, S + j] * total[j, S + k] for j in range(T))
                total = new / new.sum(-1, keepdims=True)
        np.testing.assert_allclose(c.matrix, total, atol=1e-6)


def test_ssru_brute_force_agrees(tmp_path):
    """The SSRU with its gates held fixed: each decoder input run alone through the recurrence (the others' inputs
    zero), the ReLU's pattern of the whole cell applied, the residual added to the token's own vector."""
    b = core.load(build_tiny_checkpoint(tmp_path / "m", seed=5, decoder_self="ssru"), device="cpu")
    c = contributions(b, "The cat sleeps.")
    assert any("SSRU" in n for n in c.notes)
    out = [int(i) for i in b.translate("The cat sleeps.").trace["output.ids"]]
    trace, _ = recorded_pass(b, b.encode_source("The cat sleeps.")[0], out, InferenceOptions())
    for layer, m in enumerate(b.model.decoder_layers):
        x = np.array(trace["embed.tgt" if layer == 0 else f"decoder.{layer - 1}.out"], dtype=np.float64)
        f = np.array(trace.gates(layer), dtype=np.float64)
        xw = x @ m.ssru.W.weight.detach().double().numpy().T
        T, D = x.shape
        alone = np.zeros((T, T, D))  # alone[t, j]: what input j alone leaves in the cell at t
        for j in range(T):
            cell = np.zeros(D)
            for t in range(T):
                cell = f[t] * cell + (1 - f[t]) * (xw[t] if t == j else 0.0)
                alone[t, j] = cell
        rows = []
        for t in range(T):
            on = alone[t].sum(0) > 0
            vectors = [alone[t, j] * on + (x[t] if j == t else 0.0) for j in range(T)]
            total = sum(vectors)
            norm = m.self_attn_norm
            y = _layer_norm(total, total, norm) + norm.bias.detach().double().numpy()
            rows.append(_alti_row([_layer_norm(v, total, norm) for v in vectors], y))
        np.testing.assert_allclose(c.self_layers[layer], rows, atol=1e-6)


# ---- value-weighted norms ----


def test_value_norms_are_weights_times_value_sizes(bundle):
    opts = SWITCHES["heads off"]
    vn = value_norms(bundle, TEXT, options=opts)
    assert ("decoder", 0) in vn.heads or bundle.config.decoder_self == "ssru"
    for (kind, layer), norms in vn.heads.items():
        H, Tq, Tk = vn.weights[(kind, layer)].shape
        assert norms.shape == (H, Tq, Tk) and (norms >= 0).all()
        assert (norms[list(opts.ablated_heads(kind, layer))] == 0).all()  # a switched-off head moves nothing
        assert ((vn.weights[(kind, layer)] == 0) <= (norms == 0)).all()  # no weight, no norm
        assert vn.combined[(kind, layer)].shape == (Tq, Tk)
        # the heads' sum is no longer than the sum of their lengths (triangle inequality)
        assert (vn.combined[(kind, layer)] <= norms.sum(0) + 1e-9).all()
    assert ("encoder", 0) in vn.heads and ("cross", 1) in vn.heads


# ---- real checkpoints ----


@pytest.mark.parametrize("name", ["distilled-en-pt", "bergamot-en-pt"])
def test_real_checkpoints(name):
    path = ROOT / "checkpoints" / name
    if not (path / "model.safetensors").is_file():
        pytest.skip(f"checkpoint {name} not downloaded (make models)")
    b = core.load(path, device="cpu")
    text = "My brother bought a new car yesterday."
    c = contributions(b, text)
    assert c.reconstruction_error < 1e-4 and c.decoder_self == b.config.decoder_self
    for m in (c.encoder_layers, c.self_layers, c.cross_layers, c.layers):
        assert_distributions(m)
    assert 0.5 < c.source_share < 1
    assert list(c.target_pieces) == b.translate(text).output_tokens
    off = contributions(b, text, options=InferenceOptions(positional_encoding=False))
    assert off.reconstruction_error < 1e-4 and off.source_share != c.source_share


@pytest.mark.parametrize("suffix", ["npz", "json"])
def test_contributions_travel_with_an_exported_trace(bundle, tmp_path, suffix):
    out = bundle.translate(TEXT)
    c = contributions(bundle, TEXT, options=SWITCHES["heads off"])
    assert Contributions.from_trace(out.trace) is None
    path = out.trace.with_analysis(*c.to_arrays()).save(tmp_path / f"t.{suffix}")
    back = Contributions.from_trace(core.Trace.load(path))
    assert back is not None
    assert back.target_pieces == c.target_pieces and back.source_pieces == c.source_pieces
    assert back.notes == c.notes and back.forced == c.forced and back.decoder_self == c.decoder_self
    assert back.source_share == pytest.approx(c.source_share) and back.options == c.options != out.options
    for name in Contributions.ARRAYS:  # JSON keeps 4 decimals
        np.testing.assert_allclose(getattr(back, name), getattr(c, name), atol=1e-4 if suffix == "json" else 1e-6)


def test_given_ids_are_scored_as_fed_not_read_again(bundle):
    """Ids a run was fed (the Compare page's B reading A's translation): the same as their text given when the text
    tokenizes to them; ids no text gives back (a piece repeated as decoding may write it) are kept as they are."""
    ids = bundle.encode_target("the cat sleeps")
    by_ids = contributions(bundle, TEXT, output_ids=ids)
    np.testing.assert_allclose(
        by_ids.matrix, contributions(bundle, TEXT, translation="the cat sleeps").matrix, atol=1e-9
    )
    assert by_ids.forced and list(by_ids.target_pieces) == [bundle.tokenizer.piece(i) for i in ids]
    odd = [*ids[:-1], ids[0], ids[-1]]  # the first piece once more, before eos
    assert len(contributions(bundle, TEXT, output_ids=odd).target_pieces) == len(odd)
