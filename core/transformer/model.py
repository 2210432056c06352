"""The encoder-decoder Transformer of "Attention Is All You Need": encode / decode / forward."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig
from ..fast.plan import DecoderState, make_plan, run_layers
from ..recording.call import DEFAULT_CALL, Call
from ..sites import Side, Stack, embed_site, memory_site
from .attention import binder
from .blocks import DecoderWeights, EncoderWeights, Masks
from .layers import DecoderLayer, EncoderLayer, LayerStack, make_norm
from .masks import causal_mask, combine, full_mask, padding_mask
from .positional import LearnedPositions, NoPositions, RelativePositionBias, SinusoidalPositions


def make_positions(cfg: ModelConfig) -> nn.Module:
    """The positional encoding the config names: (length, offset) -> (T, D) rows, read from row ``position_offset``."""
    if cfg.positional == "relative":
        return NoPositions(cfg.d_model)  # T5: positions enter as the attention's relative bias (``relative_bias``)
    if cfg.positional == "sinusoidal":
        return SinusoidalPositions(cfg.d_model, cfg.pe_layout, row_offset=cfg.position_offset)
    return LearnedPositions(cfg.d_model, cfg.max_positions, row_offset=cfg.position_offset)


def relative_bias(cfg: ModelConfig, *, bidirectional: bool) -> RelativePositionBias:
    """T5's relative position bias module for one stack of ``cfg``."""
    return RelativePositionBias(
        cfg.n_heads, cfg.relative_buckets, cfg.relative_max_distance, bidirectional=bidirectional
    )


class Transformer(nn.Module):
    """Encoder-decoder Transformer.

    Every method takes one per-call ``Call`` (``core.recording.call``): the ``InferenceOptions``, an optional
    ``Recorder`` (records and intervenes at named sites, ``core.sites``), optional ``FastWeights`` (the fast path) and
    the shortlist's ids; nothing is stored on the module during a call, so one instance can serve many threads.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = cfg = config
        self.src_embed = nn.Embedding(cfg.src_vocab_size, cfg.d_model)
        self.tgt_embed = self.src_embed if cfg.share_embeddings else nn.Embedding(cfg.tgt_vocab_size, cfg.d_model)
        self.positions: nn.Module = make_positions(cfg)  # the source's; the target's too unless separate
        # BART's learned tables are one per side; None: the target reads ``positions`` (``side_positions``)
        self.tgt_positions: nn.Module | None = make_positions(cfg) if cfg.separate_positions else None
        # BART's layernorm_embedding, on each side's embeddings + positions; Identity when the config has none
        self.src_embed_norm = make_norm(cfg) if cfg.embed_norm else nn.Identity()
        self.tgt_embed_norm = make_norm(cfg) if cfg.embed_norm else nn.Identity()
        self.encoder_layers: LayerStack[EncoderLayer] = LayerStack(
            EncoderLayer(cfg, i) for i in range(cfg.n_encoder_layers)
        )
        self.decoder_layers: LayerStack[DecoderLayer] = LayerStack(
            DecoderLayer(cfg, i) for i in range(cfg.n_decoder_layers)
        )
        final_norm = cfg.norm == "pre"  # pre-norm stacks end in a norm of their own (mBART, M2M100: layer_norm)
        self.encoder_norm = make_norm(cfg) if final_norm else nn.Identity()
        self.decoder_norm = make_norm(cfg) if final_norm else nn.Identity()
        # T5's relative position bias, one per stack (bidirectional in the encoder, causal in the decoder), shared
        # by the stack's layers; None without it
        relative = cfg.positional == "relative"
        self.encoder_bias: RelativePositionBias | None = relative_bias(cfg, bidirectional=True) if relative else None
        self.decoder_bias: RelativePositionBias | None = relative_bias(cfg, bidirectional=False) if relative else None
        self.output = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=cfg.output_bias)
        # T5 v1.0 scales the decoder's output by d_model**-0.5 before its tied output projection
        self.output_scale = cfg.d_model**-0.5 if cfg.scale_decoder_output else 1.0
        self.dropout = nn.Dropout(cfg.dropout)
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0
        self._init_weights()
        if cfg.tie_output:
            self.output.weight = self.tgt_embed.weight

    def _init_weights(self) -> None:
        for name, p in self.named_parameters():
            if p.dim() > 1 and "positions" not in name and "_bias.embedding" not in name:
                nn.init.xavier_uniform_(p)
            elif name.endswith(".bias") and "norm" not in name:
                nn.init.zeros_(p)
        for emb in {id(self.src_embed): self.src_embed, id(self.tgt_embed): self.tgt_embed}.values():
            nn.init.normal_(emb.weight, std=self.config.d_model**-0.5)
        for layer in self.decoder_layers:
            if layer.ssru is not None:
                nn.init.zeros_(layer.ssru.W_f.bias)

    # ------------------------------------------------------------------ pieces
    def side_positions(self, side: Side) -> nn.Module:
        """The positions ``side`` adds: (length, offset) -> (T, D) (``core.transformer.positional``)."""
        return self.tgt_positions if side == "tgt" and self.tgt_positions is not None else self.positions

    def layer_weights(self, stack: Stack, layer: int) -> EncoderWeights | DecoderWeights:
        """Layer ``layer`` of ``stack`` resolved as the reference path runs it (its own tensors, ``F.linear``): the
        matrices, norms and sites the one layer function of ``core.transformer.blocks`` reads (what teaching pages
        show)."""
        if stack == "encoder":
            return list(self.encoder_layers)[layer].weights(binder(F.linear))
        return list(self.decoder_layers)[layer].weights(binder(F.linear))

    def position_bias(self, side: Side, sizes: tuple[int, int], call: Call, offset: int = 0) -> Tensor | None:
        """The relative position bias (1, H, Tq, Tk) that the self-attention of the stack reading ``side`` adds ('src':
        the encoder, 'tgt': the decoder), for sizes (Tq, Tk) with queries at [offset, offset + Tq): made once per call
        (per step when decoding) and shared by the stack's layers. None for a model without one, and when
        ``call.options`` switch positions off on that side. Recorded at 'pe.src.bias' / 'pe.tgt.bias' (zeros when
        switched off)."""
        module = self.encoder_bias if side == "src" else self.decoder_bias
        if module is None:
            return None
        bias = module(*sizes, offset) if call.options.pe_on(side) else None
        if call.recorder is not None:
            shown = bias[0] if bias is not None else module.embedding.weight.new_zeros(self.config.n_heads, *sizes)
            call.recorder.position_bias(side, shown)  # (H, Tq, Tk)
        return bias

    def tied_aliases(self) -> dict[str, str]:
        """Parameter names that alias another one (saved once): alias -> canonical name."""
        seen: dict[int, str] = {}
        aliases: dict[str, str] = {}
        for name, tensor in self.state_dict(keep_vars=True).items():
            key = id(tensor)
            if key in seen:
                aliases[name] = seen[key]
            else:
                seen[key] = name
        return aliases

    def embed(self, tokens: Tensor, side: Side, call: Call = DEFAULT_CALL, offset: int = 0) -> Tensor:
        """tokens (B, T) at positions [offset, offset + T) -> (B, T, D): embedding * sqrt(D) (unscaled when the config
        says ``scale_embedding=False``) + positional encoding (zeros when ``call.options`` switch it off), then the
        side's embedding LayerNorm when the config has one (``embed_norm``). With ``pad_position_zero`` a <pad> token
        gets no position (the recorded rows stay the table's). The result is the site 'embed.src' / 'embed.tgt'."""
        table = self.src_embed if side == "src" else self.tgt_embed
        x = table(tokens)  # (B, T, D)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        if side == "tgt" and offset == 0 and self.config.start == "zeros":
            x = torch.cat([torch.zeros_like(x[:, :1]), x[:, 1:]], dim=1)  # first input is a zero vector
        T = tokens.shape[1]
        pe_on = call.options.pe_on(side)
        pe = self.side_positions(side)(T, offset) if pe_on else x.new_zeros(T, self.config.d_model)  # (T, D)
        if self.config.pad_position_zero and pe_on:  # M2M100: <pad> has no position
            x = x + pe * (tokens != self.config.pad_id)[..., None]  # (B, T, D)
        else:
            x = x + pe
        if self.config.embed_norm:
            x = (self.src_embed_norm if side == "src" else self.tgt_embed_norm)(x)
        if self.training:
            x = self.dropout(x)
        recorder = call.recorder
        if recorder is not None:
            recorder.positional(side, pe)
            x = recorder.activation(embed_site(side), x, offset)
        return x

    # ------------------------------------------------------------------ encoder
    def encode(
        self,
        src: Tensor,
        src_keep: Tensor | None = None,
        call: Call = DEFAULT_CALL,
        *,
        start: tuple[int, Tensor] | None = None,
    ) -> Tensor:
        """src (B, Ts) token ids -> memory (B, Ts, D). src_keep (B, Ts) True = real token (None: ``keep_flags``).
        call: the per-call context (``core.recording.call``: options, recorder, fast weights).

        start: (i, x) resumes at encoder layer i with x (B, Ts, D) as its input (the site 'encoder.{i-1}.out', or
        'embed.src' for i = 0, of a run with the same options and the same padding): the layers before it are not
        run again, so a recorder sees (and records) only layers i onwards.
        """
        call = call.begin(self)
        recorder = call.recorder
        if src_keep is None:
            src_keep = self.keep_flags(src)
        mask = padding_mask(src_keep) if call.options.padding_mask else None  # (B, 1, Ts)
        if recorder is not None:
            B, Ts = src.shape
            recorder.ids("src", src, src_keep)
            recorder.mask("encoder", full_mask(mask, B, Ts, Ts, src.device))
        if mask is not None and bool(mask.all()):
            mask = None  # nothing is padded: attention without a mask is faster and gives the same result
        if start is None:
            first, x = 0, self.embed(src, "src", call)
        else:
            first, x = start
            if not 0 <= first < len(self.encoder_layers) or x.shape != (*src.shape, self.config.d_model):
                raise ValueError(
                    f"start: layer {first} of {len(self.encoder_layers)} with an input of shape {tuple(x.shape)} "
                    f"(wanted {(*src.shape, self.config.d_model)})"
                )
        bias = self.position_bias("src", (src.shape[1], src.shape[1]), call)  # (1, H, Ts, Ts) or None
        for i, layer in enumerate(self.encoder_layers):
            if i < first:
                continue
            x = layer(x, mask, call, bias)  # records its output
        memory = self.encoder_norm(x)
        if recorder is not None and recorder.record_activations:
            memory = recorder.activation(memory_site(), memory)
        return memory

    # ------------------------------------------------------------------ decoder
    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        src_keep: Tensor | None,
        call: Call = DEFAULT_CALL,
        *,
        state: DecoderState | None = None,
        tgt_keep: Tensor | None = None,
    ) -> Tensor:
        """Decoder inputs tgt (B, T) (new positions only when ``state`` is given) -> logits (B, T, V), or (B, T, S)
        when ``call.vocab`` (S,) names the ids to score (a lexical shortlist, ``core.decoding.shortlist``): position j
        then scores id vocab[j]. One decoding call passes the same Call at every step.

        src_keep (B, Ts): True = real source token; None = all real (lets a decoding loop check once).
        tgt_keep (B, offset + T): True = real target token (padding mask on decoder keys); None = all real.
        state: the call's incremental state (KV cache); with ``call.fast`` a one-position step runs the per-call
        plan of ``core.fast.plan``.
        """
        return self._decoder(tgt, memory, (src_keep, tgt_keep), call, state, False)

    def decoder_states(
        self,
        tgt: Tensor,
        memory: Tensor,
        src_keep: Tensor | None,
        call: Call = DEFAULT_CALL,
        *,
        tgt_keep: Tensor | None = None,
    ) -> Tensor:
        """``decode``'s final norm output (B, T, D) instead of its logits, for the caller to project (``logits``),
        e.g. a few positions at a time so that no (B, T, V) tensor is ever made."""
        return self._decoder(tgt, memory, (src_keep, tgt_keep), call, None, True)

    def _decoder(
        self,
        tgt: Tensor,
        memory: Tensor,
        keep: tuple[Tensor | None, Tensor | None],
        call: Call,
        state: DecoderState | None,
        hidden: bool,
    ) -> Tensor:
        """``decode`` (logits) or ``decoder_states`` (``hidden``); keep: (src_keep, tgt_keep)."""
        call = call.begin(self)
        recorder, options = call.recorder, call.options
        src_keep, tgt_keep = keep
        B, T = tgt.shape
        offset = state.length if state is not None else 0
        n_key = offset + T
        # One new position sees every key so far: its causal mask is all True, so none is built (decoding steps).
        causal = options.causal_mask and T > 1
        self_mask = causal_mask(T, n_key, offset=offset, device=tgt.device)[None] if causal else None  # (1, T, Tk)
        if options.padding_mask and tgt_keep is not None:
            self_mask = combine(self_mask, padding_mask(tgt_keep))  # (B, T, Tk)
        cross_mask = padding_mask(src_keep) if options.padding_mask and src_keep is not None else None  # (B, 1, Ts)
        if recorder is not None:
            recorder.ids("tgt", tgt, tgt_keep)
            if self.config.decoder_self == "attention":
                recorder.mask("decoder", full_mask(self_mask, B, T, n_key, tgt.device))
            recorder.mask("cross", full_mask(cross_mask, B, T, memory.shape[1], tgt.device))
        x = self.embed(tgt, "tgt", call, offset)
        bias = self.position_bias("tgt", (T, n_key), call, offset)  # (1, H, T, Tk) or None
        fast, vocab = call.fast, call.vocab
        if state is not None and fast is not None and T == 1 and self_mask is None and not hidden:
            if state.plan is None or state.plan[0] != B or state.plan[1] is not vocab:
                state.plan = (B, vocab, make_plan(self, fast, B, vocab))
            plan = state.plan[2]
            if plan is not None:  # an incremental decoding step: the same layers, without module overhead
                state.length = n_key
                return run_layers(plan, x, memory, state, Masks(None, cross_mask, bias), recorder)  # (B, 1, V)
        real = None  # the real query positions, (B, T): the feed-forward runs on them alone
        if options.padding_mask and tgt_keep is not None and not bool(tgt_keep[:, -T:].all()):
            real = tgt_keep[:, -T:]  # tgt_keep (B, offset + T) covers the cached keys too
        masks = Masks(self_mask, cross_mask, bias, real)
        for i, layer in enumerate(self.decoder_layers):
            x = layer(x, memory, masks, call, state.layers[i] if state is not None else None, offset)
        if state is not None:
            state.length = n_key
        x = self.decoder_norm(x)
        return x if hidden else self.logits(x, call)  # (B, T, D) or (B, T, V|S)

    def logits(self, h: Tensor, call: Call = DEFAULT_CALL) -> Tensor:
        """The vocabulary projection of final decoder states h (..., D) -> (..., V), or (..., S) for the ids in
        ``call.vocab`` (S,) only (after ``output_scale``, T5 v1.0's d_model**-0.5)."""
        if self.output_scale != 1.0:
            h = h * self.output_scale  # T5 v1.0: d_model**-0.5 before the tied projection
        if call.vocab is not None:
            return F.linear(h, *self.output_rows(call.vocab))
        return call.linear(h, self.output.weight, self.output.bias)

    def output_rows(self, vocab: Tensor) -> tuple[Tensor, Tensor | None]:
        """The output projection's rows (and bias) for the ids ``vocab`` (S,): (S, D), (S,)."""
        bias = self.output.bias
        return self.output.weight.index_select(0, vocab), None if bias is None else bias.index_select(0, vocab)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        call: Call = DEFAULT_CALL,
        *,
        src_keep: Tensor | None = None,
        tgt_keep: Tensor | None = None,
        last_only: bool = False,
    ) -> Tensor:
        """Teacher-forced pass: src (B, Ts), decoder inputs tgt (B, Tt) -> logits (B, Tt, V) ((B, 1, V) with
        ``last_only``: the vocabulary projection is most of a probe's cost; S instead of V for the ids in
        ``call.vocab``, as ``decode``)."""
        if src_keep is None:
            src_keep = self.keep_flags(src)
        call = call.begin(self)  # one recorder for both halves, also the one ablation makes
        memory = self.encode(src, src_keep, call)
        h = self.decoder_states(tgt, memory, src_keep, call, tgt_keep=tgt_keep)  # (B, Tt, D)
        return self.logits(h[:, -1:] if last_only else h, call)

    def keep_flags(self, ids: Tensor) -> Tensor:
        """(B, T) True = a real token, inferred from ``pad_id`` — except where the pad id is also eos or bos (Marian
        models use 0 for all three): ids cannot tell padding apart there, so every position counts as real. Pass
        the flags yourself for a padded batch."""
        cfg = self.config
        if cfg.pad_id in (cfg.eos_id, cfg.bos_id):
            return torch.ones_like(ids, dtype=torch.bool)
        return ids != cfg.pad_id

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
