"""What the server promises however it was started: loopback only, no usage statistics, local Host names.

Streamlit reads ``.streamlit/config.toml`` from the working directory and, since 1.5x, from the main script's
folder too: ``viz_app/.streamlit/config.toml`` (a link to the repository's) makes the safe settings hold from
any working directory. Flags or environment variables can still override them (``--server.address 0.0.0.0``,
``--browser.gatherUsageStats true``, an older Streamlit): the app then refuses to serve its pages instead of
running unsafe, unless the person starting it asked for network serving on purpose (``LAB_SERVE_NETWORK=1``).

The Host check closes the DNS-rebinding route: a page on another site whose name is re-pointed at 127.0.0.1
becomes same-origin with this server (so the Origin check passes), but its requests carry that site's name
in the Host header. Sessions whose Host is not a local name (or one listed in ``LAB_ALLOWED_HOSTS``) get a
refusal before any widget exists, so no widget message of theirs can ever load anything.
"""

from __future__ import annotations

import os

LOOPBACK_ADDRESSES = {"localhost", "127.0.0.1", "::1"}
LOCAL_HOSTS = LOOPBACK_ADDRESSES | {"[::1]"}


def host_name(host: str) -> str:
    """The name part of a Host header value: ``localhost:8501`` -> ``localhost``, ``[::1]:8501`` -> ``[::1]``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def allowed_hosts() -> set[str]:
    """Local names plus the comma-separated names in ``LAB_ALLOWED_HOSTS`` (for serving a network on purpose)."""
    extra = {h.strip().lower() for h in os.environ.get("LAB_ALLOWED_HOSTS", "").split(",") if h.strip()}
    return LOCAL_HOSTS | extra


def host_problem(host: str | None) -> str | None:
    """Why a session with this Host header is refused, or None. No header (an in-process test) is local."""
    if host is None:
        return None
    if host_name(host) in allowed_hosts():
        return None
    return (
        "This page was requested under a name that is not this machine's (the Host header is not local), as a "
        "DNS-rebinding page would. The lab answers only http://localhost:PORT. To serve it under another name "
        "on purpose, list that name in LAB_ALLOWED_HOSTS."
    )


def settings_problem(address: str | None, gather_usage_stats: bool) -> str | None:
    """Why the server's settings are unsafe, or None. ``LAB_SERVE_NETWORK=1`` accepts a non-loopback address."""
    problems = []
    if (address or "").strip().lower() not in LOOPBACK_ADDRESSES and os.environ.get("LAB_SERVE_NETWORK") != "1":
        where = f"address {address!r}" if address else "no address, i.e. every network interface"
        problems.append(f"it listens on {where}")
    if gather_usage_stats:
        problems.append("usage statistics are on (the browser would send them out of this machine)")
    if not problems:
        return None
    return (
        "This server was started without the lab's safe settings: " + "; ".join(problems) + ". Start it with "
        "`make run`, or run `streamlit run viz_app/app.py` from the repository's root folder (where "
        "`.streamlit/config.toml` lives). To serve a network on purpose: "
        "`LAB_SERVE_NETWORK=1 LAB_ALLOWED_HOSTS=<name> streamlit run viz_app/app.py --server.address 0.0.0.0 "
        "--browser.gatherUsageStats false` — anyone who can reach the port can then use the lab."
    )
