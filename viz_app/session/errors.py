"""What a page shows instead of a traceback: ``guarded`` runs a call and names what went wrong; notices."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import streamlit as st

import core

T = TypeVar("T")


def guarded(call: Callable[[], T], refused: str = "Cannot translate this text.") -> T | None:
    """Run ``call``; show a friendly message instead of a traceback and return None if it fails. ``refused``
    heads the message of an input the call refuses (what the input was for)."""
    try:
        return call()
    except core.InputError as exc:
        why = str(exc)
        st.warning(f"**{refused}** {why[:1].upper()}{why[1:]}", icon=":material/edit_note:")
    except core.CheckpointError as exc:
        st.error(f"**The checkpoint cannot be loaded.** {exc}", icon=":material/inventory_2:")
    except core.LabError as exc:
        st.error(f"**Something is wrong with the request.** {exc}", icon=":material/warning:")
    except Exception as exc:  # noqa: BLE001 — last resort: never show a bare traceback
        logging.getLogger("viz_app").exception("unexpected error while serving a page")  # details go to the server log
        st.error(
            f"**Unexpected error** ({type(exc).__name__}): {exc}. The details are in the server's log.",
            icon=":material/bug_report:",
        )
    return None


def show_notices(out: core.Translation) -> None:
    """Truncation and unknown-piece notices, visibly."""
    for notice in out.notices:
        st.warning(notice, icon=":material/info:")
