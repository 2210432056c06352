"""What the Positional-encoding page says about the model's positions, computed from its config (no Streamlit):
which signal it has (sinusoids, a learned table, or a relative bias on the scores), from which table row it reads,
how its relative distances are bucketed, and what the "Positional encoding" switch removes."""

from __future__ import annotations

import core
from core.anatomy.positions import RelativeBias

# the formula this model really uses, by layout (core.transformer.positional.sinusoidal_table), on two lines
PE_FORMULAS = {
    "interleaved": r"\begin{gathered}PE_{(pos,\,2i)} = \sin\!\left(\frac{pos}{10000^{2i/d_{model}}}\right) \\ "
    r"PE_{(pos,\,2i+1)} = \cos\!\left(\frac{pos}{10000^{2i/d_{model}}}\right)\end{gathered}",
    "concatenated_hf": r"\begin{gathered}PE_{(pos,\,i)} = \sin\!\left(\frac{pos}{10000^{2i/d_{model}}}\right) \\ "
    r"PE_{(pos,\,d_{model}/2\,+\,i)} = \cos\!\left(\frac{pos}{10000^{2i/d_{model}}}\right)\end{gathered}",
    "concatenated": r"\begin{gathered}PE_{(pos,\,i)} = \sin\!\left(pos \cdot 10000^{-i/(d_{model}/2-1)}\right) \\ "
    r"PE_{(pos,\,d_{model}/2\,+\,i)} = \cos\!\left(pos \cdot 10000^{-i/(d_{model}/2-1)}\right)\end{gathered}",
}
# the one place the lab counts from 0 on a page: the formula's own symbols, as the paper writes them
FORMULA_COUNT = (
    "In the formula pos and i count from 0, as in the paper: the page's position 1 is pos = 0, and this page "
    "numbers dimensions from 0 to match."
)
PE_NOTES = {
    "interleaved": "The paper's layout: sines in the even dimensions, cosines in the odd ones (i = 0 … d_model/2 − 1).",
    "concatenated_hf": "Hugging Face's Marian layout: the sines fill the first half of the dimensions and the "
    "cosines the second half, at the paper's frequencies (so dimensions 0 and 1 are both sines).",
    "concatenated": "The tensor2tensor / Marian / fairseq layout: the sines fill the first half of the dimensions "
    "and the cosines the second half, with frequencies spread evenly on a log scale from 1 to 1/10000 (so "
    "dimensions 0 and 1 are both sines).",
}


def offset_note(cfg: core.ModelConfig) -> str:
    """'' without a row offset; else which row the first token reads."""
    k = cfg.position_offset
    if not k:
        return ""
    return (
        f" Position 1 reads row {k + 1} of the table (rows counted from 1, as positions are), not row 1: position p "
        f"reads row p + {k} (the first {k} rows are "
        "never read; fairseq kept them for padding)."
    )


def embed_norm_note(cfg: core.ModelConfig) -> str:
    """'' without an embedding norm; else that one follows the sum."""
    if not cfg.embed_norm:
        return ""
    norm = "an RMSNorm" if cfg.norm_kind == "rms" else "a LayerNorm"
    return f" The sum of embedding and position then goes through {norm} (layernorm_embedding) before layer 1."


def summary(cfg: core.ModelConfig) -> str:
    """One paragraph: what this model adds for position, said from its config."""
    if cfg.positional == "relative":
        return (
            "This model adds **no position vector** to its token embeddings. Instead each self-attention adds a "
            "learned number to every score q·k, chosen by how far the key is from the query (a **relative position "
            f"bias**): one number per head for each of {cfg.relative_buckets} distance buckets. The encoder and the "
            "decoder learned a table each, and every layer of a stack uses its stack's table; cross-attention gets "
            "no bias."
        )
    if cfg.positional == "learned":
        tables = "a table for the source and one for the target" if cfg.separate_positions else "one table"
        return (
            f"This model **learned** one position vector per position ({cfg.max_positions:,} positions, {tables}) "
            "instead of computing sinusoids; the vector is added to the token's embedding."
            + offset_note(cfg)
            + embed_norm_note(cfg)
        )
    return (
        PE_NOTES[cfg.pe_layout]
        + f" Here d_model = {cfg.d_model}. {FORMULA_COUNT}"
        + offset_note(cfg)
        + embed_norm_note(cfg)
    )


def buckets(bias: RelativeBias) -> str:
    """How distances map to buckets in one stack, from its bias (numbers from the config)."""
    ways = (
        f"{bias.n_buckets // 2} buckets for keys before the query and {bias.n_buckets // 2} for keys after it"
        if bias.bidirectional
        else f"all {bias.n_buckets} buckets for keys before the query (later keys are hidden by the causal mask)"
    )
    return (
        f"The {bias.stack} has {ways}. Distances 0 to {bias.exact - 1} get a bucket each; from {bias.exact} to "
        f"{bias.max_distance - 1} they share buckets that grow wider on a log scale; from {bias.max_distance} on "
        "every distance reads the same last bucket: the model cannot tell a key "
        f"{bias.max_distance + 10} tokens away from one {bias.max_distance + 50} tokens away."
    )


def side_help(cfg: core.ModelConfig) -> str:
    """What "Positions removed on" chooses on this model."""
    if cfg.positional == "relative":
        return "The encoder's self-attention bias (the source words), the decoder's (the translation so far), or both."
    return "The encoder's input (the source words), the decoder's input (the translation so far), or both."


def short(cfg: core.ModelConfig) -> str:
    """A few words for the model card: 'sinusoids (concatenated), from row 3', 'relative bias, 32 buckets' …"""
    if cfg.positional == "relative":
        return f"relative position bias ({cfg.relative_buckets} buckets up to distance {cfg.relative_max_distance})"
    kind = (
        f"learned table{'s, one per side' if cfg.separate_positions else ''}"
        if cfg.positional == "learned"
        else f"sinusoids ({cfg.pe_layout})"
    )
    return kind + (f", from row {cfg.position_offset + 1}" if cfg.position_offset else "")  # rows counted from 1


def switch_help(cfg: core.ModelConfig) -> str:
    """What the sidebar's "Positional encoding" switch does on this model."""
    if cfg.positional == "relative":
        return "Add the relative position bias to the self-attention scores (off: every distance gets bias 0)."
    return "Add the position signal to the token embeddings."
