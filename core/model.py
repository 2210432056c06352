"""The encoder-decoder Transformer of "Attention Is All You Need": encode / decode / forward."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from .config import InferenceOptions, ModelConfig
from .fastlinear import linear
from .layers import DecoderLayer, DecoderState, EncoderLayer
from .masks import causal_mask, combine, full_mask, padding_mask
from .positional import LearnedPositions, SinusoidalPositions
from .step import run_layers

if TYPE_CHECKING:
    from .trace import Recorder

DEFAULT_OPTIONS = InferenceOptions()


class Transformer(nn.Module):
    """Encoder-decoder Transformer.

    Every method takes the per-call ``InferenceOptions`` and an optional per-call ``Recorder``;
    nothing is stored on the module during a call, so one instance can serve many threads.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = cfg = config
        self.src_embed = nn.Embedding(cfg.src_vocab_size, cfg.d_model)
        self.tgt_embed = self.src_embed if cfg.share_embeddings else nn.Embedding(cfg.tgt_vocab_size, cfg.d_model)
        if cfg.positional == "sinusoidal":
            self.positions: nn.Module = SinusoidalPositions(cfg.d_model, cfg.pe_layout)
        else:
            self.positions = LearnedPositions(cfg.d_model, cfg.max_positions)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        final_norm = cfg.norm == "pre"
        self.encoder_norm = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps) if final_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps) if final_norm else nn.Identity()
        self.output = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=cfg.output_bias)
        self.dropout = nn.Dropout(cfg.dropout)
        self._init_weights()
        if cfg.tie_output:
            self.output.weight = self.tgt_embed.weight
        self._decoding_layout()

    def _init_weights(self) -> None:
        for name, p in self.named_parameters():
            if p.dim() > 1 and "positions" not in name:
                nn.init.xavier_uniform_(p)
            elif name.endswith(".bias") and "norm" not in name:
                nn.init.zeros_(p)
        for emb in {id(self.src_embed): self.src_embed, id(self.tgt_embed): self.tgt_embed}.values():
            nn.init.normal_(emb.weight, std=self.config.d_model ** -0.5)
        for layer in self.decoder_layers:
            if layer.ssru is not None:
                nn.init.zeros_(layer.ssru.W_f.bias)

    def _decoding_layout(self) -> None:
        """Store the matrices read at every decoding step column-major: same values, shapes and state_dict.

        A decoding step multiplies ONE vector by each decoder matrix and the output projection, so it
        streams every one of them from memory (23 MB per token at the benchmark's sizes). MKL streams an
        (in, out)-contiguous matrix faster than nn.Linear's (out, in) one: ~30% on the decoder's matrices
        alone, ~15% on a whole translation on our machines (benchmarks/RESULTS.md). load_state_dict copies
        into the existing tensors, so the layout survives loading; checkpoints are written contiguous;
        a training step showed no measurable change. A tied output projection stays row-major: it is also
        the embedding table, and a row look-up in a column-major table cost more (~0.2 ms per step) than
        the layout saved; float16-valued weights go through ``fastlinear``'s packed copy anyway.
        """
        matrices = [m.weight for layer in self.decoder_layers for m in layer.modules() if isinstance(m, nn.Linear)]
        embeddings = {id(self.src_embed.weight), id(self.tgt_embed.weight)}
        if id(self.output.weight) not in embeddings:
            matrices.append(self.output.weight)
        for weight in {id(w): w for w in matrices}.values():
            weight.data = weight.data.t().contiguous().t()  # (out, in) with strides (1, out)

    # ------------------------------------------------------------------ pieces
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

    def _head_keep(self, options: InferenceOptions, kind: str, layer: int, device: torch.device) -> Tensor | None:
        if not options.ablate:
            return None
        ablated = options.ablated_heads(kind, layer)
        if not ablated:
            return None
        keep = torch.ones(self.config.n_heads, device=device)
        keep[[h for h in ablated if h < self.config.n_heads]] = 0.0
        return keep  # (H,)

    def embed(self, tokens: Tensor, side: str, options: InferenceOptions, offset: int = 0,
              recorder: "Recorder | None" = None) -> Tensor:
        """tokens (B, T) -> (B, T, D): embedding * sqrt(D) + positional encoding (zeros when off)."""
        table = self.src_embed if side == "src" else self.tgt_embed
        x = table(tokens) * math.sqrt(self.config.d_model)  # (B, T, D)
        if side == "tgt" and offset == 0 and self.config.start == "zeros":
            x = torch.cat([torch.zeros_like(x[:, :1]), x[:, 1:]], dim=1)  # first input is a zero vector
        T = tokens.shape[1]
        if options.positional_encoding:
            pe = self.positions(T, offset)  # (T, D)
        else:
            pe = x.new_zeros(T, self.config.d_model)
        if recorder is not None:
            recorder.positional(side, pe)
        x = x + pe
        return self.dropout(x) if self.training else x

    # ------------------------------------------------------------------ encoder
    def encode(self, src: Tensor, src_keep: Tensor | None = None, options: InferenceOptions = DEFAULT_OPTIONS,
               recorder: "Recorder | None" = None) -> Tensor:
        """src (B, Ts) token ids -> memory (B, Ts, D). src_keep (B, Ts) True = real token."""
        if src_keep is None:
            src_keep = src != self.config.pad_id
        mask = padding_mask(src_keep) if options.padding_mask else None  # (B, 1, Ts)
        if recorder is not None:
            B, Ts = src.shape
            recorder.mask("encoder", full_mask(mask, B, Ts, Ts, src.device))
        if mask is not None and bool(mask.all()):
            mask = None  # nothing is padded: attention without a mask is faster and gives the same result
        x = self.embed(src, "src", options, 0, recorder)
        for i, layer in enumerate(self.encoder_layers):
            x = layer(x, mask, i, self._head_keep(options, "encoder", i, x.device), recorder)
        return self.encoder_norm(x)

    # ------------------------------------------------------------------ decoder
    def decode(self, tgt: Tensor, memory: Tensor, src_keep: Tensor | None, options: InferenceOptions = DEFAULT_OPTIONS,
               recorder: "Recorder | None" = None, state: DecoderState | None = None,
               tgt_keep: Tensor | None = None) -> Tensor:
        """Decoder inputs tgt (B, T) (new positions only when ``state`` is given) -> logits (B, T, V).

        tgt_keep (B, offset + T): True = real target token (padding mask on decoder keys); None = all real.
        src_keep (B, Ts): True = real source token; None = all real (lets a decoding loop check once).
        """
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
            if self.config.decoder_self == "attention":
                recorder.mask("decoder", full_mask(self_mask, B, T, n_key, tgt.device))
            recorder.mask("cross", full_mask(cross_mask, B, T, memory.shape[1], tgt.device))
        x = self.embed(tgt, "tgt", options, offset, recorder)
        keeps = [(self._head_keep(options, "decoder", i, x.device), self._head_keep(options, "cross", i, x.device))
                 for i in range(len(self.decoder_layers))]
        plan = state.step_plan(self, B) if state is not None and T == 1 and self_mask is None else None
        if plan is not None:  # an incremental decoding step: the same computation without module overhead
            assert state is not None
            for layer, layer_state in zip(self.decoder_layers, state.layers):
                layer.cross_kv(memory, layer_state)  # projected at the first step, kept in the state
            state.length = n_key
            return run_layers(plan, x, state, cross_mask, keeps, recorder)  # (B, 1, V)
        for i, layer in enumerate(self.decoder_layers):
            x = layer(x, memory, self_mask, cross_mask, i, keeps[i], recorder,
                      state.layers[i] if state is not None else None)
        if state is not None:
            state.length = n_key
        return linear(self.decoder_norm(x), self.output.weight, self.output.bias)  # (B, T, V)

    def forward(self, src: Tensor, tgt: Tensor, options: InferenceOptions = DEFAULT_OPTIONS,
                recorder: "Recorder | None" = None, src_keep: Tensor | None = None,
                tgt_keep: Tensor | None = None) -> Tensor:
        """Teacher-forced pass: src (B, Ts), decoder inputs tgt (B, Tt) -> logits (B, Tt, V)."""
        if src_keep is None:
            src_keep = src != self.config.pad_id
        memory = self.encode(src, src_keep, options, recorder)
        return self.decode(tgt, memory, src_keep, options, recorder, None, tgt_keep)

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
