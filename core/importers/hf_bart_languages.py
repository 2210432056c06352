"""The BART family's languages and framing: which language codes a folder's tokenizer has, which source and target
language an import uses (the flags, else the folder's), and how a source is framed around its text (mBART
``x </s> en_XX``; mBART-50 and NLLB ``eng_Latn x </s>``; M2M100 ``__en__ x </s>``; BART ``<s> x </s>``), with the
decoder's start token and the forced first output that name the target language (``hf_bart`` sets them up)."""

from __future__ import annotations

import json
import re

from ..errors import CheckpointError, InputError
from ..text.hf_tokenizers import FastTokenizer, Framing, M2M100VocabTokenizer
from ..text.tokenizer import Tokenizer
from .hf_common import one_id, setting, setting_from
from .hf_entry import HFFolder, Languages
from .hf_folder import CONFIG, TOKENIZER_CONFIG

LANGUAGE_CODE = {  # what a language token of each tokenizer looks like
    "mbart": re.compile(r"[a-z]{2}_[A-Z]{2}"),  # en_XX, de_DE
    "nllb": re.compile(r"[a-z]{3}_[A-Z][a-z]{3}"),  # eng_Latn
}


def variant(f: HFFolder) -> str:
    """'bart', 'mbart', 'm2m100' or 'nllb' (an m2m_100 folder whose tokenizer is NllbTokenizer)."""
    if f.model_type == "m2m_100":
        return "nllb" if str(f.tokenizer_config.get("tokenizer_class", "")).startswith("Nllb") else "m2m100"
    return f.model_type


def language_codes(f: HFFolder, tokenizer: Tokenizer) -> dict[str, int]:
    """The language codes the tokenizer has -> their ids ({} for BART: it has none)."""
    if isinstance(tokenizer, M2M100VocabTokenizer):
        return {token.strip("_"): i for token, i in tokenizer.language_ids.items()}
    pattern = LANGUAGE_CODE.get(variant(f))
    if pattern is None or not isinstance(tokenizer, FastTokenizer):
        return {}
    added = tokenizer.backend.get_added_tokens_decoder()
    return {t.content: int(i) for i, t in added.items() if pattern.fullmatch(t.content)}


def pick_language(
    f: HFFolder, codes: dict[str, int], asked: str | None, default: tuple[str | None, str], flag: str
) -> tuple[str, str]:
    """(the language code, where it came from): ``asked`` (a flag), else ``default`` (the folder's, and the field
    that says it); InputError naming the codes there are."""
    chosen, source = (asked, flag) if asked else default
    if not codes:
        return (chosen, source) if chosen else ("src" if flag == "--source-language" else "tgt", "")
    if chosen is None:
        raise InputError(f"{f.folder}: name the language with {flag}; this tokenizer has: {', '.join(codes)}")
    if chosen not in codes:
        has = f"not a language code of this {variant(f)} tokenizer; it has: {', '.join(codes)}"
        if source == flag:
            raise InputError(f"{flag} {chosen!r}: {has}")
        raise InputError(f"{f.folder}: {source} says {chosen!r}, {has} (name one with {flag})")
    return chosen, source


def target_default(f: HFFolder, names: dict[int, str]) -> tuple[str | None, str]:
    """The folder's target language as ``generate`` takes it, and the field that says it: the forced first token
    (``forced_bos_token_id``), else the decoder's start token when it is a language code (mBART-cc25 / en-ro),
    else tokenizer_config.json's ``tgt_lang``."""
    for name in ("forced_bos_token_id", "decoder_start_token_id"):
        value, where = setting_from(f, name)
        if value is not None and one_id(value, name, f.path(where)) in names:
            return names[one_id(value, name, f.path(where))], f"{where} {name}"
    return f.tokenizer_config.get("tgt_lang"), f"{TOKENIZER_CONFIG} tgt_lang"


def code_first(f: HFFolder, tokenizer: Tokenizer) -> bool:
    """Whether the source language's code comes before the text (``en_XX x </s>``) rather than after its eos
    (``x </s> en_XX``), as the folder's tokenizer class frames it: mBART-50 and NLLB (unless its
    ``legacy_behaviour``) before, mBART-cc25 after; a folder that names no class, as its tokenizer.json's template."""
    cls = str(f.tokenizer_config.get("tokenizer_class") or "")
    if cls.startswith("MBart50"):
        return True
    if cls.startswith("Nllb"):
        return not f.tokenizer_config.get("legacy_behaviour")
    if cls.startswith("MBart") or not isinstance(tokenizer, FastTokenizer):
        return variant(f) != "mbart"
    template = template_order(tokenizer)
    return variant(f) != "mbart" if template is None else template


def template_order(tokenizer: FastTokenizer) -> bool | None:
    """Whether tokenizer.json's single-sequence template puts a special token before the text; None without one."""
    post = json.loads(tokenizer.backend.to_str()).get("post_processor") or {}
    single = post.get("single") if isinstance(post, dict) else None
    if not isinstance(single, list) or not single:
        return None
    return isinstance(single[0], dict) and "SpecialToken" in single[0]


def framing(
    f: HFFolder, tokenizer: Tokenizer, languages: Languages
) -> tuple[Framing, tuple[str, str], int, int | None, tuple[str, str]]:
    """(the source / target framing, the language pair, the decoder's start id, the forced first id, where each
    language came from)."""
    family = variant(f)
    codes = language_codes(f, tokenizer)
    if not codes and family != "bart":
        example = {"mbart": "en_XX", "nllb": "eng_Latn"}.get(family, "__en__")
        raise CheckpointError(
            f"{tokenizer.path}: has no language codes (tokens like {example}), which a {family} model reads and "
            "writes; save the tokenizer with its languages (NllbTokenizer: extra_special_tokens=FAIRSEQ_LANGUAGE_CODES)"
        )
    names = {i: code for code, i in codes.items()}
    src_default = (f.tokenizer_config.get("src_lang"), f"{TOKENIZER_CONFIG} src_lang")
    src, src_from = pick_language(f, codes, languages[0], src_default, "--source-language")
    tgt, tgt_from = pick_language(f, codes, languages[1], target_default(f, names), "--target-language")
    ids = tokenizer.special_ids()
    bos, eos = ids["bos_id"], ids["eos_id"]
    start = setting(f, "decoder_start_token_id", f.config.get("bos_token_id", bos) if f.model_type == "mbart" else eos)
    if not isinstance(start, int) or isinstance(start, bool):
        raise CheckpointError(f"{f.path(CONFIG)}: field decoder_start_token_id must be one token id, got {start!r}")
    where = (src_from, tgt_from)
    forced_setting = setting(f, "forced_bos_token_id")
    if family == "bart":
        forced = forced_setting if isinstance(forced_setting, int) and not isinstance(forced_setting, bool) else None
        return Framing((bos,), (eos,), () if forced is None else (forced,)), (src, tgt), start, forced, where
    first = code_first(f, tokenizer)
    prefix, suffix = ((codes[src],), (eos,)) if first else ((), (eos, codes[src]))
    if family == "mbart" and start in names:  # mbart-large-cc25 / en-ro: the decoder starts from the language code
        return Framing(prefix, suffix), (src, tgt), codes[tgt], None, where
    return Framing(prefix, suffix, (codes[tgt],)), (src, tgt), start, codes[tgt], where
