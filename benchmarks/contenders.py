"""The contenders of ``make bench``: our model and its peers at ONE size, with random weights.

Every builder returns a zero-argument callable that performs one complete unit of work
(a forward pass, one translation of ``SRC_LEN`` tokens into exactly ``NEW_TOKENS`` tokens, ...),
so ``timing.interleaved`` can time them in the same rounds. End-of-sentence is suppressed
everywhere (an output bias of -1e9 on eos, plus min/max new tokens for ``generate``), and each
translation contender checks once that it really produced ``NEW_TOKENS`` tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import core
from core.decoding.search import beam_search, greedy
from core.fast.plan import DecoderState
from core.recording.call import Call

Work = Callable[[], object]


@dataclass(frozen=True)
class Sizes:
    vocab: int = 8000
    d_model: int = 256
    layers: int = 4  # encoder layers = decoder layers
    heads: int = 8
    ffn: int = 1024
    src_len: int = 20
    new_tokens: int = 20


SIZES = Sizes()
PAD, BOS, EOS = 0, 1, 2
NO_EOS = -1e9  # output bias on eos: greedy never picks it


def source(length: int, batch: int = 1, seed: int = 0, vocab: int = SIZES.vocab) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, vocab, (batch, length), generator=g)  # (B, Ts), no pad/bos/eos


# ----------------------------------------------------------------------------- ours
def our_model(s: Sizes = SIZES, seed: int = 0) -> core.Transformer:
    cfg = core.ModelConfig(
        src_vocab_size=s.vocab,
        tgt_vocab_size=s.vocab,
        d_model=s.d_model,
        n_heads=s.heads,
        n_encoder_layers=s.layers,
        n_decoder_layers=s.layers,
        d_ff=s.ffn,
        dropout=0.0,
        output_bias=True,
        pad_id=PAD,
        bos_id=BOS,
        eos_id=EOS,
    )
    torch.manual_seed(seed)
    model = core.Transformer(cfg).eval()
    with torch.no_grad():
        model.output.bias[EOS] = NO_EOS
        for (
            p
        ) in model.parameters():  # float16 values, as every committed checkpoint stores them (still float32 tensors)
            p.copy_(p.half().float())
    return model


def ours_forward(model: core.Transformer, src: Tensor, tgt: Tensor, traced: bool, qkv: bool = False) -> Work:
    """One teacher-forced pass; traced = with a Recorder, frozen into a Trace (what the app receives)."""
    opts, keep, fast = core.InferenceOptions(), torch.ones_like(src, dtype=torch.bool), core.FastWeights(model)

    @torch.inference_mode()
    def run() -> object:
        if not traced:
            return model(src, tgt, call=Call(options=opts, fast=fast), src_keep=keep)
        rec = core.Recorder(model, qkv=qkv)
        model(src, tgt, call=Call(options=opts, recorder=rec, fast=fast), src_keep=keep)
        return rec.freeze()

    return run


def ours_greedy(
    model: core.Transformer, src: Tensor, traced: bool, n: int = SIZES.new_tokens, qkv: bool = False
) -> Work:
    """Greedy translation of ``src`` into exactly ``n`` tokens; traced = every head recorded + frozen Trace."""
    opts, keep, fast = core.InferenceOptions(), torch.ones_like(src, dtype=torch.bool), core.FastWeights(model)

    @torch.inference_mode()
    def run() -> object:
        rec = core.Recorder(model, qkv=qkv) if traced else None
        out = greedy(model, src, keep, call=Call(options=opts, recorder=rec, fast=fast, max_len=n))
        return rec.freeze() if rec is not None else out

    return run


def ours_beam(model: core.Transformer, src: Tensor, beam: int = 4, n: int = SIZES.new_tokens) -> Work:
    opts, keep, fast = core.InferenceOptions(), torch.ones_like(src, dtype=torch.bool), core.FastWeights(model)

    @torch.inference_mode()
    def run() -> object:
        return beam_search(model, src, keep, call=Call(options=opts, fast=fast, max_len=n, beam_size=beam))

    return run


def ours_decode_step(model: core.Transformer, src: Tensor, t: int, cached: bool) -> Work:
    """The step that produces target position ``t`` (1-based): with the KV cache (one new position,
    the cache already holding t-1), or recomputing the whole t-position prefix."""
    keep, call = torch.ones_like(src, dtype=torch.bool), Call(fast=core.FastWeights(model))  # one per translation
    with torch.inference_mode():
        memory = model.encode(src, keep, call)
        prefix = source(t, seed=t, vocab=model.config.tgt_vocab_size)  # (1, t) decoder inputs
        prefix[:, 0] = BOS
        state = DecoderState.empty(model.config.n_decoder_layers)
        for i in range(t - 1):  # one position at a time, as decoding fills the cache (and makes the call's plan
            # once per translation, not per step: it stays out of the step's time)
            model.decode(prefix[:, i : i + 1], memory, None, call, state=state)

    def snapshot() -> DecoderState:  # a state holding t-1 positions; it shares the KV buffers, so every run
        # writes the same keys/values into slot t-1 again (same values each time: timing stays honest)
        return dataclasses.replace(state, layers=[dataclasses.replace(layer) for layer in state.layers])

    @torch.inference_mode()
    def run() -> object:
        if cached:  # src_keep=None: nothing is padded, as iter_greedy passes it
            return model.decode(prefix[:, -1:], memory, None, call, state=snapshot())
        return model.decode(prefix, memory, None, call)

    return run


def ours_matmuls_only(
    model: core.Transformer, fast: bool, src_len: int = SIZES.src_len, n: int = SIZES.new_tokens
) -> Work:
    """ONLY the weight-matrix products of one greedy translation, in order, on the model's own tensors:
    the encoder's (src_len rows each), the cross-attention K/V (once), then per step the decoder's
    (fused Q/K/V, output, cross Q and output, FFN) and the output projection, one row each. Nothing else
    (no attention, norms, softmax, Python control). fast=False: ``F.linear`` on float32, what every peer
    here runs; fast=True: ``core.FastWeights.linear``, what ours runs (float16 weights where lossless)."""
    weights = core.FastWeights(model)
    mm = weights.linear if fast else F.linear
    linears = lambda *mods: [(m.weight, m.bias) for m in mods]  # noqa: E731
    encoder = [
        wb
        for layer in model.encoder_layers
        for wb in linears(
            layer.self_attn.q_proj,
            layer.self_attn.k_proj,
            layer.self_attn.v_proj,
            layer.self_attn.out_proj,
            layer.ffn.linear1,
            layer.ffn.linear2,
        )
    ]
    cross = [wb for layer in model.decoder_layers for wb in linears(layer.cross_attn.k_proj, layer.cross_attn.v_proj)]
    step: list[tuple[Tensor, Tensor | None]] = []
    for i, layer in enumerate(model.decoder_layers):
        assert layer.self_attn is not None
        step += [
            weights.fused_qkv[i],
            *linears(
                layer.self_attn.out_proj,
                layer.cross_attn.q_proj,
                layer.cross_attn.out_proj,
                layer.ffn.linear1,
                layer.ffn.linear2,
            ),
        ]
    step += linears(model.output)
    g = torch.Generator().manual_seed(0)
    rows = {
        (T, d): torch.randn(1, T, d, generator=g)
        for T in (1, src_len)
        for d in (model.config.d_model, model.config.d_ff)
    }

    @torch.inference_mode()
    def run() -> object:
        for w, b in encoder + cross:
            mm(rows[src_len, w.shape[1]], w, b)
        for _ in range(n):
            for w, b in step:
                y = mm(rows[1, w.shape[1]], w, b)
        return y

    return run


def check_ours(work: Work, n: int) -> None:
    out = work()
    tokens = out.tokens if hasattr(out, "tokens") else None
    if tokens is not None:
        assert tokens.shape[1] == n + 1 and not bool((tokens[:, 1:] == EOS).any()), "ours did not make n tokens"
    elif isinstance(out, core.Trace):
        assert out.attention("cross", 0).shape[1] == n, out.attention("cross", 0).shape


# ----------------------------------------------------------------------------- transformers (MarianMT)
def marian_model(attn: str, s: Sizes = SIZES, seed: int = 0) -> nn.Module:
    from transformers import MarianConfig, MarianMTModel

    cfg = MarianConfig(
        vocab_size=s.vocab,
        d_model=s.d_model,
        encoder_layers=s.layers,
        decoder_layers=s.layers,
        encoder_attention_heads=s.heads,
        decoder_attention_heads=s.heads,
        encoder_ffn_dim=s.ffn,
        decoder_ffn_dim=s.ffn,
        activation_function="relu",
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        max_position_embeddings=512,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
        bos_token_id=BOS,
        forced_eos_token_id=None,
        attn_implementation=attn,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(cfg).eval()
    assert model.config._attn_implementation == attn, model.config._attn_implementation
    with torch.no_grad():
        model.final_logits_bias[..., EOS] = NO_EOS
    return model


def marian_generate(model: nn.Module, src: Tensor, attentions: bool, n: int = SIZES.new_tokens) -> Work:
    mask = torch.ones_like(src)
    kwargs = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, num_beams=1)
    if attentions:
        kwargs.update(output_attentions=True, return_dict_in_generate=True)

    @torch.inference_mode()
    def run() -> object:
        return model.generate(input_ids=src, attention_mask=mask, **kwargs)  # type: ignore[operator]

    return run


def check_marian(work: Work, n: int, attentions: bool) -> None:
    out = work()
    seq = out.sequences if attentions else out  # type: ignore[union-attr]
    assert seq.shape[1] == n + 1 and not bool((seq[:, 1:] == EOS).any()), f"generate made {seq.shape[1] - 1} tokens"
    if attentions:
        assert len(out.cross_attentions) == n and len(out.cross_attentions[0]) == SIZES.layers  # type: ignore[union-attr]


# ----------------------------------------------------------------------------- nn.Transformer
class TorchSeq2Seq(nn.Module):
    """``nn.Transformer`` with embeddings and an output layer: the textbook greedy loop that recomputes the prefix."""

    def __init__(self, s: Sizes = SIZES) -> None:
        super().__init__()
        self.embed = nn.Embedding(s.vocab, s.d_model)
        self.core = nn.Transformer(s.d_model, s.heads, s.layers, s.layers, s.ffn, dropout=0.0, batch_first=True)
        self.output = nn.Linear(s.d_model, s.vocab)
        self.d_model = s.d_model

    @torch.inference_mode()
    def greedy(self, src: Tensor, n: int) -> Tensor:
        scale = self.d_model**0.5
        memory = self.core.encoder(self.embed(src) * scale)  # (B, Ts, D)
        tokens = torch.full((src.shape[0], 1), BOS, dtype=torch.long)
        for _ in range(n):
            T = tokens.shape[1]
            causal = nn.Transformer.generate_square_subsequent_mask(T)  # (T, T) float, -inf above the diagonal
            h = self.core.decoder(self.embed(tokens) * scale, memory, tgt_mask=causal, tgt_is_causal=True)
            next_ids = self.output(h[:, -1]).argmax(-1)  # (B,)
            tokens = torch.cat([tokens, next_ids[:, None]], dim=1)
        return tokens


def torch_model(s: Sizes = SIZES, seed: int = 0) -> TorchSeq2Seq:
    torch.manual_seed(seed)
    model = TorchSeq2Seq(s).eval()
    with torch.no_grad():
        model.output.bias[EOS] = NO_EOS
    return model


def torch_greedy(model: TorchSeq2Seq, src: Tensor, n: int = SIZES.new_tokens) -> Work:
    return lambda: model.greedy(src, n)
