"""The sidebar's "Open a Hugging Face folder": a path, a name, an Import button with a progress bar; the new
checkpoint is selected, or the page says in words what was refused and why."""

from __future__ import annotations

import logging

import streamlit as st

import core
from core.importers.hf_families import checkpoint_name
from viz_app.session import checkpoints, importing
from viz_app.widgets.markup import md


def select_pending() -> bool:
    """Before the picker is drawn: select the checkpoint the last run imported. True when there was one."""
    name = st.session_state.pop("_import_selected", None)  # drawn by then: the picker
    if name:
        st.session_state["ckpt"] = name
    return bool(name)


def _placeholder() -> str:
    """The name the typed folder would get (shown greyed in the name box)."""
    try:
        return checkpoint_name(importing.folder_from_text(str(st.session_state.get("hf_folder", ""))))
    except (core.InputError, OSError):
        return "the folder's name"


def _run_import(bar: st.delta_generator.DeltaGenerator) -> None:
    ss = st.session_state

    def progress(fraction: float, text: str) -> None:
        bar.progress(fraction, text=text)

    try:
        done = importing.import_folder(str(ss.get("hf_folder", "")), str(ss.get("hf_name", "")), progress)
    except core.LabError as exc:
        why = str(exc)
        ss["_import_result"] = ("error", f"**Not imported:** {why[:1].upper()}{why[1:]}")
        bar.empty()
        return
    except OSError as exc:  # a folder the server may not read, a full disk, …
        ss["_import_result"] = ("error", f"**Not imported:** the folder could not be read or written ({exc}).")
        bar.empty()
        return
    except Exception as exc:  # noqa: BLE001 — never a traceback: the details go to the server's log
        logging.getLogger("viz_app").exception("importing a Hugging Face folder failed")
        ss["_import_result"] = ("error", f"**Not imported:** unexpected {type(exc).__name__}: {exc}")
        bar.empty()
        return
    ss["_import_result"] = (
        "success",
        f"Imported **{md(done.name)}** ({done.megabytes:.1f} MB, {done.seconds:.1f} s) and selected it.",
    )
    ss["_import_selected"] = done.name
    ss.pop("hf_name", None)
    st.rerun()


def open_folder(*, expanded: bool = False) -> None:
    """The expander: folder path, checkpoint name, Import; the last import's outcome below it."""
    ss = st.session_state
    with st.expander(
        "Open a Hugging Face folder",
        expanded=expanded or "_import_result" in ss or bool(ss.get("hf_folder")),
        icon=":material/folder_open:",
    ):
        problem = importing.refused_here()
        if problem:
            st.caption(problem)
            return
        st.text_input(
            "Folder on this machine",
            key="hf_folder",
            placeholder="~/.cache/huggingface/hub/models--…/snapshots/…",
            help="A folder with config.json, model.safetensors and the tokenizer files, e.g. a snapshot in the "
            "Hugging Face cache. The lab opens: " + importing.families() + ".",
        )
        st.text_input("Checkpoint name", key="hf_name", placeholder=_placeholder(), max_chars=80)
        bar = st.empty()
        if st.button("Import", key="hf_import", icon=":material/download:"):
            _run_import(bar)
        result = ss.pop("_import_result", None)  # said once
        if result:
            kind, message = result
            (st.success if kind == "success" else st.error)(message)
        st.caption(f"Written into `{checkpoints.checkpoint_root()}`; the folder itself is only read.")
