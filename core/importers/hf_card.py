"""The card (card.md) of a checkpoint imported from a Hugging Face folder: where it came from, its licence, the
family's facts (``Family.card``: the model, what the conversion did) and the folder's generation settings, with
what the conversion did and did not carry over."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..config import ModelConfig
from .hf_common import generation_source
from .hf_entry import Card, HFFolder

# generation settings transformers' generate reads that a call here chooses for itself (greedy or beam, its length)
CALL_FIELDS = ("num_beams", "max_length", "max_new_tokens")
# ... and rules core does not reproduce, with the value that switches each off (a folder's "off" is not listed)
UNAPPLIED_FIELDS: dict[str, Any] = {
    "min_new_tokens": 0,
    "encoder_repetition_penalty": 1.0,
    "renormalize_logits": False,
    "stop_strings": None,
    "watermarking_config": None,
    "dola_layers": None,
    "penalty_alpha": None,
    "exponential_decay_length_penalty": None,
    "sequence_bias": None,
    "do_sample": False,
    "num_beam_groups": 1,
    "diversity_penalty": 0.0,
}


def unapplied_settings(f: HFFolder, cfg: ModelConfig) -> list[str]:
    """The folder's generation settings that change ``generate``'s output and that core does not reproduce, as
    "`name=value`" (empty: greedy and beam outputs are generate's)."""
    settings, _ = generation_source(f)
    unapplied = [
        f"`{key}={settings[key]!r}`"
        for key, off in UNAPPLIED_FIELDS.items()
        if settings.get(key, off) not in (None, off)
    ]
    if settings.get("forced_bos_token_id") is not None and cfg.forced_bos_id is None:
        unapplied.append(f"`forced_bos_token_id={settings['forced_bos_token_id']!r}`")
    return unapplied


def generation_text(f: HFFolder, cfg: ModelConfig, piece: Callable[[int], str]) -> str:
    """The card's paragraph on the folder's generation settings (as generate reads them: ``generation_source``):
    the rules core applies as generate does (``core.decoding.generation_rules``, ``core.decoding.beam_finish``, the
    banned and forced ids), those it does not, and those each call chooses."""
    settings, where = generation_source(f)
    applied = [f"`length_penalty={cfg.length_penalty:g}` and `early_stopping={cfg.early_stopping!r}` (beam search)"]
    if cfg.forced_bos_id is not None:
        applied.append(f"the first output forced to {cfg.forced_bos_id} (`{piece(cfg.forced_bos_id)}`)")
    if cfg.min_length > 1:
        applied.append(f"`min_length={cfg.min_length}` (eos banned at the first {cfg.min_length - 1} output steps)")
    if cfg.no_repeat_ngram_size:
        applied.append(f"`no_repeat_ngram_size={cfg.no_repeat_ngram_size}` (no n-gram of that size twice)")
    if cfg.encoder_no_repeat_ngram_size:
        n = cfg.encoder_no_repeat_ngram_size
        applied.append(f"`encoder_no_repeat_ngram_size={n}` (no n-gram of that size of the source copied)")
    if cfg.repetition_penalty != 1.0:
        applied.append(
            f"`repetition_penalty={cfg.repetition_penalty:g}` (the score of a piece already written divided by it "
            "where positive, multiplied where negative)"
        )
    if cfg.forced_eos_id is not None:
        applied.append(
            f"`forced_eos_token_id={cfg.forced_eos_id}` (`{piece(cfg.forced_eos_id)}` forced at the last step a call "
            "allows)"
        )
    if cfg.suppress_ids:
        applied.append("never chosen: " + ", ".join(f"{i} (`{piece(i)}`)" for i in cfg.suppress_ids))
    unapplied = unapplied_settings(f, cfg)
    chosen = [f"`{key}={settings[key]!r}`" for key in CALL_FIELDS if settings.get(key) is not None]
    return (
        f"Generation settings (`{where.name}`), applied as transformers' `generate` applies them: "
        f"{'; '.join(applied)}. Not applied: {', '.join(unapplied) or 'none set'}. Chosen per call instead: "
        f"{', '.join(chosen) or 'none set'} — greedy or beam search and the output length, in the app or the command "
        "line."
    )


def card_text(
    *, name: str, f: HFFolder, card: Card, cfg: ModelConfig, piece: Callable[[int], str], command: str
) -> str:
    """The checkpoint's card.md: its source and licence, ``card`` (the family's facts), the command that made it
    and the generation settings (``generation_text``)."""
    version = f.config.get("transformers_version") or "not recorded"
    parity = " wherever the settings not applied above leave them alone" if unapplied_settings(f, cfg) else ""
    return f"""# {name}: imported from a Hugging Face {card.title} folder

Converted from the local folder `{f.folder.resolve()}` (written by transformers {version}). All credit for the
model goes to its authors; this checkpoint only converts it so the lab can show its attention.

## Licence

licence: {f.licence}

Keep the original folder's licence and credits with this checkpoint.

## Model

{card.model}

{card.more}## Conversion

```
{command or "core.importers.hf_families.convert (no command line)"}
```

{card.conversion}

{generation_text(f, cfg, piece)}
Beam search runs as transformers' does (`num_beams` hypotheses live, a pool of finished ones), so greedy and beam
outputs are `generate`'s{parity}. `config.json` records the source under `imported_from`.
"""
