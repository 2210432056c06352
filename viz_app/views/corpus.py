"""Corpus: many sentence pairs scanned at once (the CLI's ``python -m core scan``), then explored — a summary, a
table to sort and filter, a scatter and histograms — and any row opened on every other page."""

from __future__ import annotations

import functools
from pathlib import Path

import streamlit as st

from core.analysis.corpus_sets import CorpusSet, builtin_sets
from core.analysis.heads import STAT_TITLES, STATS
from core.analysis.scan import DEFAULT_THRESHOLD
from viz_app import claims_corpus
from viz_app.cache import peek
from viz_app.claims import counted, md
from viz_app.corpus import store, table
from viz_app.figures import corpus as figures
from viz_app.session import checkpoints, errors, params, selection, url
from viz_app.widgets import export, heads_over_set

REPO = Path(__file__).resolve().parents[2]
MAX_UPLOAD_MB = 4
MAX_LINES = 10_000
MAX_HEAD_SENTENCES = 1_000  # sources the heads are measured on (one traced translation each)
OPEN_ON = {  # the pages a row opens on: page script -> button label
    "views/overview.py": "Translate & overview",
    "views/explain.py": "Why this word?",
    "views/steps.py": "Step-by-step decoding",
    "views/heads.py": "What does each head do?",
}

st.title("Corpus")
st.caption(
    "Scan many sentence pairs at once: each pair's **source share** (how much of each output word came from the "
    "source sentence rather than the words already written, ALTI+), flagged when low — a translation that may have "
    "come loose from its source — with its log-probability, language check, invented words and, where a reference "
    "is given, chrF. Scored as trained (the sidebar's switches do not apply here); the same records as "
    "`python -m core scan`."
)


@st.cache_data(show_spinner=False, max_entries=8)
def _sets(source_language: str, target_language: str) -> list[CorpusSet]:
    return builtin_sets(source_language, target_language, REPO / "data" / "ding-split")


def _start(key: str) -> None:
    st.session_state["_corpus_running"] = key


def _cancel() -> None:
    st.session_state.pop("_corpus_running", None)


def _open(source: str) -> None:
    st.session_state["text"], st.session_state["sentence"], st.session_state["whatif"] = source, 0, ()


def _input() -> tuple[bytes, str] | None:
    """The bytes to scan and what to call them, or None (after saying why) when there is nothing to scan yet."""
    b = selection.bundle()
    if b is None:
        return None
    kind = st.radio(
        "Pairs to scan",
        ["builtin", "upload"],
        key="corpus_source",
        horizontal=True,
        format_func=lambda v: "a built-in set" if v == "builtin" else "a file of my own",
    )
    if kind == "builtin":
        sets = {s.key: s for s in _sets(*b.languages)}
        url.clamp("corpus_set", list(sets))  # another model's set chosen before: this model's first
        chosen = sets[st.selectbox("Set", list(sets), key="corpus_set", format_func=lambda k: sets[k].title)]
        return chosen.data, chosen.title
    file = st.file_uploader(
        "A UTF-8 text file, one pair a line: source, or source<TAB>translation, or "
        "source<TAB>translation<TAB>reference (no translation: the model's own is scored)",
        type=["tsv", "txt"],
        key="corpus_file",
        max_upload_size=MAX_UPLOAD_MB,
        help=f"At most {MAX_UPLOAD_MB} MB and {MAX_LINES:,} lines; `python -m core scan` takes any size.",
    )
    if file is None:
        return None
    data = file.getvalue()
    n_lines = data.count(b"\n") + (not data.endswith(b"\n") and bool(data))
    if len(data) > MAX_UPLOAD_MB * 1_000_000 or n_lines > MAX_LINES:
        st.error(
            f"**{md(file.name)} is too large for the page**: {n_lines:,} lines, {len(data) / 1e6:.1f} MB; the page "
            f"scans at most {MAX_LINES:,} lines and {MAX_UPLOAD_MB} MB. Split it, or scan it with "
            "`python -m core scan` (no limit) and read its JSON lines.",
            icon=":material/description:",
        )
        return None
    if not n_lines:
        st.warning(f"**{md(file.name)} is empty**: there is no line to scan.", icon=":material/description:")
        return None
    return data, file.name


def _progress(scan: store.CorpusScan) -> None:
    """The scan button, or while the scan runs its progress bar and Cancel (what was scored stays); in one slot,
    so the button does not linger beside the bar."""
    total, done = len(scan.pairs), len(scan.records)
    slot = st.empty()
    if st.session_state.get("_corpus_running") != scan.key:
        verb = "Scan" if not done else "Continue:"
        slot.button(
            f"{verb} {counted(total - done, 'pair')}",
            key="corpus_scan",
            type="primary",
            on_click=_start,
            args=(scan.key,),
        )
        return
    with slot.container():
        bar = st.progress(done / total, text=f"Scanning: {done:,} of {total:,} pairs")
        st.button("Cancel (the pairs scanned so far are kept)", key="corpus_cancel", on_click=_cancel)
    b = selection.bundle()
    assert b is not None

    def shown(n: int) -> None:
        bar.progress(n / total, text=f"Scanning: {n:,} of {total:,} pairs")

    store.advance(b, scan, shown)
    _cancel()
    st.rerun()


def _results(scan: store.CorpusScan, checkpoint: str, threshold: float, label: str) -> None:
    records, counted = scan.at(threshold)  # what is scored now, flagged at this threshold, and its totals
    st.markdown(claims_corpus.scan_summary(counted, len(scan.pairs), threshold))
    problems = [r for r in records if "error" in r]
    if problems:
        with st.expander(f"Lines not scored ({len(problems):,})"):
            st.markdown("\n".join(f"- {md(r['error'])}" for r in problems[:200]))
            if len(problems) > 200:
                st.caption(f"… and {len(problems) - 200:,} more (the table's “not scored” filter lists them all).")
    c1, c2 = st.columns([1, 2])
    show = c1.selectbox("Show", list(table.FILTERS), key="corpus_show")
    contains = c2.text_input(
        "Lines containing", key="corpus_contains", placeholder="a word of the source, translation or reference"
    )
    view = table.kept(records, show, contains)
    st.caption(
        f"{len(view):,} of {len(records):,} lines. Click a column's name to sort; click a row's left edge to "
        "open it on the other pages (or follow its link, which carries the sentence and the model)."
    )
    event = st.dataframe(
        table.rows(view, checkpoint),
        key="corpus_table",
        on_select="rerun",
        selection_mode="single-row",
        hide_index=True,
        height=360,
        column_config={
            "line": st.column_config.NumberColumn("line", format="%d", width="small", pinned=True),
            "source": st.column_config.TextColumn("source", width="medium"),
            "translation": st.column_config.TextColumn("translation", width="medium"),
            "source share": st.column_config.ProgressColumn(
                "source share", min_value=0.0, max_value=1.0, format="%.3f"
            ),
            "mean log p": st.column_config.NumberColumn("mean log p", format="%.3f"),
            "chrF": st.column_config.NumberColumn("chrF", format="%.1f"),
            "length ratio": st.column_config.NumberColumn("length ratio", format="%.2f"),
            "open": st.column_config.LinkColumn("open", display_text="open ↗"),
        },
    )
    rows = event.selection.rows if event is not None else []
    if rows and rows[0] < len(view):
        _open_row(view[rows[0]])
    scored = [r for r in records if "error" not in r]
    if scored:
        _figures(scored, threshold)
    _downloads(records, label)
    if scored:
        _heads(scored)


def _open_row(record: dict) -> None:
    source = str(record.get("source") or "")
    st.markdown(f"**Line {record['line']:,}** · {md(source)}")
    st.caption(claims_corpus.opened_note(record["line"], bool(record.get("own_translation"))))
    for column, (page, label) in zip(st.columns(len(OPEN_ON)), OPEN_ON.items(), strict=True):
        key = page.removeprefix("views/").removesuffix(".py")
        if column.button(f"{label} →", key=f"corpus_open_{key}", on_click=_open, args=(source,)):
            st.switch_page(page)


def _figures(scored: list[dict], threshold: float) -> None:
    flagged = [bool(r["flagged"]) for r in scored]
    drawn = figures.scatter_sample(flagged)
    pick = [scored[i] for i in drawn]
    fig = figures.share_scatter(
        [r["source_share"] for r in pick],
        [r["mean_logprob"] for r in pick],
        [bool(r["flagged"]) for r in pick],
        [r["line"] for r in pick],
        [str(r["source"]) for r in pick],
        threshold=threshold,
        title="Source share against log-probability, one point a pair",
    )
    export.chart(fig, "corpus_scatter", key="corpus_scatter")
    note = claims_corpus.sample_note(len(drawn), len(scored), sum(flagged))
    if note:
        st.caption(note)
    fields = [("source_share", "Source share", "mean source share"), ("mean_logprob", "Mean log p", "log p per piece")]
    if any(r.get("chrf") is not None for r in scored):
        fields.append(("chrf", "chrF against the reference", "chrF"))
    for column, (name, title, axis) in zip(st.columns(len(fields)), fields, strict=True):
        with column:
            values = [r[name] for r in scored if r.get(name) is not None]
            export.chart(figures.histogram(values, title=title, axis=axis), f"corpus_{name}", key=f"corpus_hist_{name}")


def _downloads(records: list[dict], label: str) -> None:
    stem = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in label)[:40].strip("_") or "corpus"
    st.caption("Download the records (every field, every line scanned so far)")
    kinds = [
        ("csv", "CSV", "text/csv", table.csv_bytes),
        ("parquet", "Parquet", "application/octet-stream", table.parquet_bytes),
        ("jsonl", "JSON lines", "application/jsonl", table.jsonl_bytes),
    ]
    for column, (ext, name, mime, make) in zip(st.columns(len(kinds)), kinds, strict=True):
        column.download_button(
            f"⬇ {name}",
            data=functools.partial(make, records),
            file_name=f"scan-{stem}.{ext}",
            mime=mime,
            on_click="ignore",
            key=f"corpus_dl_{ext}",
        )


def _heads(scored: list[dict]) -> None:
    """Every head measured on the scanned sources (the model's own translations, as the heads page measures):
    each statistic's spread over them, the cross heads' agreement with ALTI+, and how steady each label is."""
    st.subheader("Heads over these sentences")
    sources = list(dict.fromkeys(str(r["source"]) for r in scored))[:MAX_HEAD_SENTENCES]
    path = checkpoints.ckpt_path()
    measured = peek(store.heads_over, path, tuple(sources))
    if measured is None:
        st.caption(
            f"Measure every head of the model on {'the first ' if len(scored) > len(sources) else ''}"
            f"{len(sources):,} distinct sources of this scan ({MAX_HEAD_SENTENCES:,} at most), each translated "
            "by the model itself: how each head's statistics spread over them, and whether its label holds sentence "
            "by sentence."
        )
        if not st.button(f"Measure every head on {len(sources):,} sentences", key="corpus_heads"):
            return
        measured = errors.guarded(lambda: store.heads_over(path, tuple(sources)))
        if measured is None:
            return
    stats, spread = measured
    stat = st.selectbox("Statistic", list(STATS), key="corpus_heads_stat", format_func=lambda s: STAT_TITLES[s])
    kinds = list(spread.values)
    for tab, kind in zip(st.tabs([params.KINDS[k].capitalize() for k in kinds]), kinds, strict=True):
        with tab:
            heads_over_set.spread_maps(spread, kind, stat)
    heads_over_set.stability(spread.stability(stats), spread.n_sentences, marked=False)  # no label maps here


chosen = _input()
if chosen is not None:
    data, label = chosen
    path = Path(checkpoints.ckpt_path())
    threshold = st.number_input(
        "Flag a pair whose mean source share is below",
        min_value=0.0,
        max_value=1.0,
        value=DEFAULT_THRESHOLD,
        step=0.01,
        format="%.3f",
        key="corpus_threshold",
        help="The default was chosen on held-out data (docs/scan.md): it flags at most 1 % of correct pairs. "
        "Changing it flags the rows again; nothing is scanned again.",
    )
    scan = store.scan_for(path, data)
    unreadable = [p for p in scan.pairs if p.error is not None]
    if unreadable and not scan.done:
        st.warning(
            f"**{len(unreadable):,} of {len(scan.pairs):,} lines cannot be scored** and will be listed as such: "
            + "; ".join(md(str(p.error)) for p in unreadable[:5])
            + ("; …" if len(unreadable) > 5 else ""),
            icon=":material/rule:",
        )
    if not scan.done:
        _progress(scan)
    if scan.records:
        _results(scan, path.name, float(threshold), label)
