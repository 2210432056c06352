"""Every tensor of one translation, in the order data flows, with this sentence's real sizes.

    out = bundle.translate(text, record=core.Record(activations=True))
    for s in tensor_shapes(out, bundle.config):
        s.stage, s.name, s.dims, s.shape, s.site        # 'encoder.0', 'Q per head', ('h', 'Ts', 'd_k'), (8, 7, 32), ...

``site`` names the Trace array that holds the tensor (one batch item, as ``trace[site]`` gives it) where the
recorder keeps it; intermediate products it does not keep (Q before the split into heads, the concatenated heads,
the feed-forward's hidden layer, the logits) have none. Per-head tensors are laid out as the recorder keeps them:
(h, T, d_k). Ts is the source's length (eos included), Tt the decoder's inputs (the start token, then every output
piece but the last), k the alternatives recorded per step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..config import ModelConfig
from ..recording.trace import Trace
from ..results import Translation
from ..sites import (
    array_of,
    attention_site,
    embed_site,
    gate_site,
    ids_site,
    layer_name,
    layer_site,
    mask_site,
    memory_site,
    output_site,
    pe_site,
)


@dataclass(frozen=True)
class TensorShape:
    stage: str  # 'source', 'encoder.0', 'target', 'decoder.1', 'output'
    name: str  # 'Q per head', 'scores QKᵀ/√d_k', ...
    dims: tuple[str, ...]  # ('h', 'Ts', 'd_k')
    shape: tuple[int, ...]  # (8, 7, 32)
    site: str | None  # the Trace array that records it, or None
    recorded: bool  # the translation's trace holds ``site``

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


Add = Callable[[str, str, tuple[str, ...], str | None], None]  # stage, name, dims, site


def _attention(add: Add, stage: str, site: str, q: str, kv: str, label: str) -> None:
    """One attention block: queries from length ``q``, keys and values from length ``kv``."""
    add(stage, f"{label}: Q = x·W_Q", (q, "d_model"), None)
    add(stage, f"{label}: Q per head", ("h", q, "d_k"), array_of(site, "q"))
    add(stage, f"{label}: K per head", ("h", kv, "d_k"), array_of(site, "k"))
    add(stage, f"{label}: V per head", ("h", kv, "d_v"), array_of(site, "v"))
    add(stage, f"{label}: scores QKᵀ/√d_k", ("h", q, kv), array_of(site, "scores"))
    add(stage, f"{label}: weights softmax(scores)", ("h", q, kv), array_of(site, "weights"))
    add(stage, f"{label}: each head's output weights·V", ("h", q, "d_v"), array_of(site, "heads"))
    add(stage, f"{label}: heads concatenated", (q, "h·d_v"), None)
    add(stage, f"{label}: output ·W_O", (q, "d_model"), None)
    add(stage, f"{label}: add & norm", (q, "d_model"), None)


def _ffn(add: Add, stage: str, t: str) -> None:
    add(stage, "feed-forward hidden act(x·W1 + b1)", (t, "d_ff"), None)
    add(stage, "feed-forward output ·W2 + b2", (t, "d_model"), None)


def tensor_shapes(translation: Translation | Trace, config: ModelConfig) -> tuple[TensorShape, ...]:
    """The tensors of ``translation`` (its trace's batch item) from the source pieces to the next word's
    probabilities, each with its shape at this sentence's sizes and the site recording it."""
    trace = translation.trace if isinstance(translation, Translation) else translation
    sizes = {
        "Ts": len(trace[ids_site("src")]),
        "Tt": len(trace[ids_site("tgt")]),
        "d_model": config.d_model,
        "h": config.n_heads,
        "d_k": config.d_head,
        "d_v": config.d_value,
        "h·d_v": config.n_heads * config.d_value,
        "d_ff": config.d_ff,
        "V": config.tgt_vocab_size,
        "k": trace[output_site("top_ids")].shape[-1] if output_site("top_ids") in trace else 0,
    }
    rows: list[TensorShape] = []

    def add(stage: str, name: str, dims: tuple[str, ...], site: str | None) -> None:
        shape = tuple(sizes[d] for d in dims)
        rows.append(TensorShape(stage, name, dims, shape, site, site is not None and site in trace))

    add("source", "source pieces (token ids)", ("Ts",), ids_site("src"))
    add("source", "token embeddings E[ids]" + ("·√d_model" if config.scale_embedding else ""), ("Ts", "d_model"), None)
    add("source", "positional encoding", ("Ts", "d_model"), pe_site("src"))
    add("source", "encoder input (embedding + position)", ("Ts", "d_model"), embed_site("src"))
    add("source", "encoder mask (True = may attend)", ("Ts", "Ts"), mask_site("encoder"))
    for i in range(config.n_encoder_layers):
        stage = layer_name("encoder", i)
        _attention(add, stage, attention_site("encoder", i), "Ts", "Ts", "self-attention")
        _ffn(add, stage, "Ts")
        add(stage, "layer output (add & norm)", ("Ts", "d_model"), layer_site("encoder", i))
    # the encoder's output as the decoder reads it (after a pre-norm encoder's final norm), recorded with activations
    add("memory", "memory (the encoder's output)", ("Ts", "d_model"), memory_site())

    add("target", "decoder inputs (start, then the outputs)", ("Tt",), ids_site("tgt"))
    add("target", "positional encoding", ("Tt", "d_model"), pe_site("tgt"))
    add("target", "decoder input (embedding + position)", ("Tt", "d_model"), embed_site("tgt"))
    if config.decoder_self == "attention":
        add("target", "decoder mask (causal, True = may attend)", ("Tt", "Tt"), mask_site("decoder"))
    add("target", "cross-attention mask", ("Tt", "Ts"), mask_site("cross"))
    for i in range(config.n_decoder_layers):
        stage = layer_name("decoder", i)
        if config.decoder_self == "ssru":
            add(stage, "SSRU: forget gates f = sigmoid(x·W_f + b_f)", ("Tt", "d_model"), gate_site(i))
            add(stage, "SSRU: output ReLU(c)", ("Tt", "d_model"), None)
            add(stage, "SSRU: add & norm", ("Tt", "d_model"), None)
        else:
            _attention(add, stage, attention_site("decoder", i), "Tt", "Tt", "masked self-attention")
        _attention(add, stage, attention_site("cross", i), "Tt", "Ts", "cross-attention")
        _ffn(add, stage, "Tt")
        add(stage, "layer output (add & norm)", ("Tt", "d_model"), layer_site("decoder", i))

    add("output", "decoder state at one step", ("d_model",), None)
    add("output", "logits at one step x·W_outᵀ" + (" + b" if config.output_bias else ""), ("V",), None)
    add("output", "next-word probabilities softmax(logits)", ("V",), None)
    add("output", "the k most likely at each step", ("Tt", "k"), output_site("top_probs"))
    add("output", "their ids", ("Tt", "k"), output_site("top_ids"))
    add("output", "the word chosen at each step", ("Tt",), output_site("ids"))
    return tuple(rows)
