"""Open a Hugging Face folder from the app: check the path and the name, import it into the checkpoint root with
the importer ``python -m core import-hf`` uses (``core.importers.hf_families``: config.json's model_type picks the
family), check the result loads, and say in words what was refused.

Nothing here draws: ``import_folder`` reports its steps to a ``progress(fraction, text)`` callback (the sidebar's
``st.progress``) and raises ``core.InputError`` / ``core.CheckpointError`` with the reason a folder is refused.
A refusal loses nothing: the user's folder is only read, and a checkpoint is written under a name that was free.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import core
from core.importers.hf_families import OPENED, checkpoint_name, convert, family, snapshot
from core.storage.checkpoint import folder_mb, load_checkpoint
from core.storage.progress import Progress, part
from viz_app.session import checkpoints

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")


@dataclass(frozen=True)
class Imported:
    """What an import wrote: the checkpoint's name under the root, its size and how long it took."""

    name: str
    folder: Path
    megabytes: float
    seconds: float


def refused_here() -> str | None:
    """Why this server does not open folders, or None. A lab serving a network on purpose (``LAB_SERVE_NETWORK=1``,
    see ``viz_app.guard``) would let anyone who reaches it read the server's folders into its checkpoint root."""
    if os.environ.get("LAB_SERVE_NETWORK") == "1":
        return (
            "Opening a folder is off while the lab serves a network (LAB_SERVE_NETWORK=1): it would read this "
            "server's folders for anyone who reaches it. Import on the server: `python -m core import-hf FOLDER`."
        )
    return None


def families() -> str:
    """The families the importer opens, for the page: 'Marian (Opus-MT), T5 / … , mT5'."""
    return ", ".join(dict.fromkeys(name for name, _ in OPENED.values()))


def folder_from_text(text: str) -> Path:
    """The folder a typed path names (quotes and a leading ~ are allowed); InputError when it names none."""
    cleaned = text.strip().strip("'\"").strip()
    if not cleaned:
        raise core.InputError("type the path of a Hugging Face model folder first")
    folder = Path(cleaned).expanduser()
    if not folder.exists():
        raise core.InputError(f"`{cleaned}` does not exist on this machine (the path is read on the lab's server)")
    if not folder.is_dir():
        raise core.InputError(
            f"`{cleaned}` is a file, not a folder — give the folder that holds config.json and model.safetensors"
        )
    return folder


def check_name(name: str) -> str:
    """``name`` if a new checkpoint can take it under the root; InputError saying why not."""
    name = name.strip()
    if not NAME.fullmatch(name):
        raise core.InputError(
            f"the name `{name[:80]}` cannot be a checkpoint folder's name: use letters, digits, '.', '-' and '_' "
            "(at most 80, starting with a letter or digit)"
        )
    if (checkpoints.checkpoint_root() / name).exists():
        raise core.InputError(
            f"a checkpoint named `{name}` is already in `{checkpoints.checkpoint_root()}`; choose another name "
            "(the one there is kept as it is)"
        )
    return name


def import_folder(text: str, name: str, progress: Progress) -> Imported:
    """Import the folder ``text`` names as the checkpoint ``name`` under the checkpoint root, reporting each step
    to ``progress``. Raises InputError / CheckpointError with the reason when the folder or the name is refused;
    then nothing was written."""
    start = time.perf_counter()
    progress(0.0, "Checking the path and the name …")
    folder = snapshot(folder_from_text(text))  # a model's folder in the Hugging Face cache: its snapshot
    name = check_name(name or checkpoint_name(folder))
    out = checkpoints.checkpoint_root() / name
    kind = family(folder)  # config.json's model_type: a family the lab does not open is refused here, by name
    progress(0.1, f"Reading and converting a {OPENED[kind][0]} folder (config, weights, tokenizer) …")
    command = f"python -m core import-hf {folder} --out {out}"
    written = convert(folder, out, command=command, progress=part(progress, 0.1, 0.8))  # per tensor, digest, write
    progress(0.8, "Checking that the new checkpoint loads …")
    try:
        load_checkpoint(written, "cpu")
    except core.LabError:
        shutil.rmtree(written, ignore_errors=True)  # written by this call under a free name: nothing else lost
        raise
    progress(1.0, f"Imported as `{name}`.")
    return Imported(name, written, folder_mb(written), time.perf_counter() - start)
