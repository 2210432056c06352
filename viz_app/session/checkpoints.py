"""The checkpoints on offer: the root folder, their names, the default, the one selected, its card.

Every path the app opens goes through ``selected``: nothing outside the listed folders is ever opened.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import streamlit as st

import core
from core.importers.hf_families import HUB_CACHE, OPENED

REPO = Path(__file__).resolve().parents[1]


def checkpoint_root() -> Path:
    """$LAB_CHECKPOINT_ROOT (default 'checkpoints'); a relative path is tried in the cwd, then the repo."""
    root = Path(os.environ.get("LAB_CHECKPOINT_ROOT", "checkpoints")).expanduser()
    if not root.is_absolute() and not root.is_dir() and (REPO / root).is_dir():
        root = REPO / root
    return root


def checkpoint_names() -> list[str]:
    """Checkpoint folders (with a config.json) directly under the root."""
    return [p.name for p in core.list_checkpoints(checkpoint_root())]


def default_checkpoint() -> str | None:
    """$LAB_CHECKPOINT if it names a checkpoint under the root, else the folder in DEFAULT, else the first."""
    return core.default_checkpoint(checkpoint_root(), os.environ.get("LAB_CHECKPOINT", "").strip())


def selected() -> str | None:
    """The selected checkpoint's name if it is one of the listed checkpoints, else None.

    A widget value can be any string a client sends (Streamlit does not check it against the options), so
    every path the app opens goes through here: nothing outside the listed folders is ever opened, and no
    message repeats a path the user did not pick from the list."""
    name = st.session_state.get("ckpt")
    return name if isinstance(name, str) and name in checkpoint_names() else None


def ckpt_path() -> str:
    """Path (as str) of the selected checkpoint folder; InputError when it is not one of the listed ones."""
    name = selected()
    if name is None:
        raise core.InputError("The chosen checkpoint is not one of the listed ones. Pick one in the sidebar.")
    return str(checkpoint_root() / name)


def quality_line(bundle: core.Bundle) -> str:
    """One line on how good the checkpoint is: config.json's 'quality', else the card's first sentence."""
    quality = bundle.info.get("quality")
    if isinstance(quality, str) and quality.strip():
        return quality.strip()[:240]
    card = card_text()
    for para in card.split("\n\n"):
        para = " ".join(para.split())
        if para and not para.startswith(("#", "|", "-")):
            return (para.split(". ")[0].rstrip(".") + ".")[:240]
    return ""


def folder_label(path: str | Path) -> str:
    """How a source folder is named to people: 'ORG/NAME (snapshot 0123abcd)' for a snapshot in the Hugging Face
    cache, else the folder's own name."""
    found = HUB_CACHE.search(Path(path).as_posix())
    if found is None:
        return Path(path).name
    return f"{found.group('repo').replace('--', '/')} (snapshot {found.group('snapshot')[:8]})"


def family(info: dict[str, Any]) -> str:
    """The model family of a checkpoint imported from a Hugging Face folder, as the importer names it ('Marian
    (Opus-MT)', 'T5 / T5 v1.1 / Flan-T5' …), from its config.json's imported_from record; '' for any other."""
    imported = info.get("imported_from")
    if not isinstance(imported, dict):
        return ""
    kind = str(imported.get("family") or str(imported.get("format", "")).removeprefix("huggingface-"))
    names = {key.replace("_", ""): name for key, (name, _) in OPENED.items()}  # 'm2m100' is model_type 'm2m_100'
    names["nllb"] = names["m2m100"]  # the BART importer's name for an NLLB folder (model_type m2m_100)
    return names.get(kind.replace("_", ""), kind)


def provenance(info: dict[str, Any]) -> str:
    """Where a checkpoint came from, from its config.json: imported (from which folder or package) or made here."""
    imported = info.get("imported_from")
    if isinstance(imported, dict):
        folder = folder_label(str(imported.get("folder", "?")))
        licence = imported.get("licence") or "not stated"
        said = f"Imported from the Hugging Face folder `{folder}` (family: {family(info)}; licence: {licence})."
        origins = [
            f"the {side} language ({info.get(f'{side}_language', '?')}) from {imported[f'{side}_language_from']}"
            for side in ("source", "target")
            if isinstance(imported.get(f"{side}_language_from"), str)
        ]
        return f"{said} Chosen at import: {' and '.join(origins)}." if origins else said
    origin = info.get("origin")
    if isinstance(origin, dict):
        return (
            f"Converted from `{origin.get('package', '?')}` ({origin.get('authors', '?')}; licence "
            f"{origin.get('licence', '?')})."
        )
    return "Made in this project (trained or distilled here; see its card)."


def card_text() -> str:
    """The selected checkpoint's card.md ('' when there is none or it cannot be read)."""
    name = selected()
    if name is None:
        return ""
    try:
        return (checkpoint_root() / name / "card.md").read_text(encoding="utf-8")[:200_000]
    except (OSError, UnicodeDecodeError):
        return ""


def export_stem(out: core.Translation) -> str:
    """'distilled-en-pt_the-cat-sleeps-on': a file name from the checkpoint and the sentence's first words."""
    model = str(out.trace.meta.get("model") or selected() or "trace")
    words = re.findall(r"\w+", out.source_text.lower())[:5]
    stem = "_".join(filter(None, [re.sub(r"[^\w.-]+", "-", model).strip("-"), "-".join(words)]))
    return stem[:80] or "trace"
