"""What the page says agrees with the numbers: a real Chromium over pages × switches, each claim checked against
the core results for the same settings (issue: "every sentence the lab says is true").

The worker's app server (tiny and the default real checkpoint) and Chromium (``lab_server``,
``chromium`` in tests/conftest.py). Each case opens a link (a fresh session, as a copied
link would), reads the page's words and the figures' data from the DOM, and compares them with ``core`` run here
with the same switches, on one thread like the server (identical arithmetic, identical greedy choices).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
import pytest
import torch
from conftest import POLL, SCREENSHOTS, new_tab, snapshot

import core
from core.analysis.attribution import attribute
from core.analysis.compare import compare
from core.analysis.contributions import contributions
from core.analysis.lens import logit_lens
from core.analysis.value_zeroing import rank_agreement, value_zeroing
from core.decoding.sampling import Sampling
from viz_app import claims, claims_compare, claims_explain
from viz_app.session.params import KINDS

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
SENTENCES = {
    "en": ("The old lighthouse keeper wrote letters to his daughter every winter.", "The cat sleeps."),
    "pt": ("O velho faroleiro escrevia cartas à filha todos os invernos.", "O gato dorme."),
}
EMPTY = "∅ (the model produced no words)"
# the sweep reads text and figure data, not pixels: a small tab, less to lay out and paint; a tall one when its
# screenshots are asked for (Streamlit scrolls inside the page, so a "full page" screenshot is the tab's height)
VIEWPORT = {"width": 1280, "height": 2000 if SCREENSHOTS else 800}
IDLE = (
    """() => document.querySelector('[data-testid="stApp"]')?.getAttribute('data-test-script-state') === 'notRunning'"""
)
# the largest |z| of the first figure whose title starts with the prefix (null when there is none)
MAX_ABS = """(prefix) => {
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    const title = ((gd.layout && gd.layout.title && gd.layout.title.text) || '')
      .replace(/<br>/g, ' ').replace(/<[^>]*>/g, '');
    if (!title.startsWith(prefix)) continue;
    let m = 0;
    for (const tr of gd._fullData || []) {
      if (!tr.z) continue;
      for (const row of tr.z) for (const v of row) if (v !== null && !Number.isNaN(v)) m = Math.max(m, Math.abs(v));
    }
    return m;
  }
  return null;
}"""


# claims whose page code does not depend on the model: the tiny model's sweep leaves them to the real one's (each
# page costs the run about 5 s of its browser phase), unless there is no real checkpoint
REAL_ONLY = frozenset({"beam-4", "padding-off", "model-map", "compare", "lens", "sample"})


def real_checkpoint(root: Path) -> str | None:
    """The default real checkpoint's name where the server has it under ``root``, else None."""
    real = core.default_checkpoint(REPO / "checkpoints")
    return real if real is not None and (root / real).exists() else None


def checkpoint(which: str, root: Path) -> str:
    if which == "tiny":
        return "tiny"
    real = real_checkpoint(root)
    if real is None:
        pytest.skip("no real checkpoint under checkpoints/ yet (make run)")
    return real


class Page:
    """One browser tab on the served app: open a link, wait until the page has run, read what it says."""

    def __init__(self, tab: object, url: str, ckpt: str) -> None:
        self.tab, self.url, self.name = tab, url, ckpt

    def open(self, shot: str, marker: str, path: str = "", **params: str) -> str:
        start = time.time()
        self.tab.goto(f"{self.url}/{path}?{urlencode({'ckpt': self.name, **params})}", timeout=120_000)
        self.tab.wait_for_function(
            "([m]) => document.querySelector('[data-testid=\"stMain\"]')?.innerText.includes(m)",
            arg=[marker],
            timeout=120_000,
            polling=POLL,
        )
        self.tab.wait_for_function(IDLE, timeout=120_000, polling=POLL)
        snapshot(self.tab, f"claims-{self.name}-{shot}")
        print(f"[{self.name}] {shot}: {time.time() - start:.1f} s")
        return self.tab.inner_text('[data-testid="stMain"]')

    def max_abs(self, title_prefix: str) -> float | None:
        """The largest |z| of the figure titled so, once Plotly has drawn it (a page's script can be idle a moment
        before its figures are); None when no such figure appears within 30 s."""
        try:
            found = self.tab.wait_for_function(
                f"(prefix) => {{ const m = ({MAX_ABS})(prefix); return m === null ? null : {{m}}; }}",
                arg=title_prefix,
                timeout=30_000,
                polling=POLL,
            )
        except Exception:  # Playwright's TimeoutError: no such figure
            return None
        return found.json_value()["m"]

    def marked(self, *labels: str) -> list[str]:
        """The words the page highlights as changed (red and green backgrounds) in the texts headed ``labels``."""
        return self.tab.eval_on_selector_all(
            '[data-testid="stMain"] .stMarkdownColoredBackground',
            """(els, labels) => els.filter(e => {
                 const box = e.closest('[data-testid="stMarkdownContainer"]');
                 return box && labels.some(l => box.innerText.startsWith(l)); }).map(e => e.textContent)""",
            list(labels),
        )


def line_after(text: str, label: str) -> str:
    """The rest of the line that starts with ``label`` (bold labels render as plain text)."""
    for line in text.splitlines():
        if line.startswith(label):
            return line[len(label) :].strip()
    raise AssertionError(f"no line starts with {label!r} in:\n{text[:3000]}")


def changed_words(before: str, after: str) -> list[str]:
    """The words ``marked_words`` highlights, in page order (before's, then after's)."""
    import difflib

    a, b = before.split(), after.split()
    out_a, out_b = [], []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op != "equal":
            out_a += a[i1:i2]
            out_b += b[j1:j2]
    return out_a + out_b


def forced_maps(bundle: core.Bundle, text: str, target: str, options: core.InferenceOptions, kind: str) -> list:
    out = bundle.teacher_forced(text, target, options, truncate=True, record=core.Record(qkv=False))
    return [out.trace.attention(kind, l) for l in range(out.trace.n_layers[kind])]


@pytest.mark.parametrize("which", ["tiny", "real"])
def test_what_the_pages_say_agrees_with_the_runs(lab_server: tuple[str, Path], chromium: object, which: str) -> None:
    url, root = lab_server
    name = checkpoint(which, root)
    torch.set_num_threads(1)  # the server's setting: identical arithmetic, identical greedy choices
    bundle = core.load(root / name, device="cpu")
    first, second = SENTENCES.get(bundle.languages[0], SENTENCES["en"])
    skip = REAL_ONLY if which == "tiny" and real_checkpoint(root) is not None else frozenset()
    with new_tab(chromium, f"claims-{name}", viewport=VIEWPORT) as opened:
        page = Page(opened, url, name)

        def translate(text: str = first, **switches: object) -> core.Translation:
            beam = int(switches.pop("beam_size", 1))  # type: ignore[call-overload]
            return bundle.translate(text, core.InferenceOptions(**switches), beam_size=beam, truncate=True)

        trained = translate()

        # 0 · /overview typed as a path opens the overview (Streamlit said "Page not found" first)
        said = page.open("overview-path", "Translation ·", path="overview", text=first)
        assert "Page not found" not in page.tab.inner_text("body") and "page=overview" in page.tab.url
        assert f"\n{trained.text or EMPTY}\n" in f"\n{said}\n"

        # 1 · positional encoding, one side at a time: the "as trained" text is the as-trained run, the switched text
        # the switched one, and the difference grid the comparison opens on (the encoder's; with PE off on the decoder
        # only, the decoder's: the encoder's cannot change) is non-zero exactly when core's maps there differ
        for side, switch in (("encoder", {"encoder_pe": False}), ("decoder", {"decoder_pe": False})):
            said = page.open(
                f"pe-{side}", "As trained (with PE):", page="positional", text=first, pe="0", pe_side=side, compare="1"
            )
            label = f"Without PE on the {side}:"
            assert line_after(said, "As trained (with PE):") == (trained.text or "∅")
            assert line_after(said, label) == (translate(**switch).text or "∅")
            if trained.text:
                core_delta = claims.largest_change(
                    forced_maps(bundle, first, trained.text, core.InferenceOptions(), side),
                    forced_maps(bundle, first, trained.text, core.InferenceOptions(**switch), side),
                )
                shown = page.max_abs(f"Difference (without PE on the {side} − as trained)")
                assert shown is not None
                assert (shown > 1e-6) == (core_delta > 1e-6), (side, shown, core_delta)
                assert ("No change: every attention weight here is the same" in said) == (
                    core_delta < claims.SAME_WEIGHT
                )
            if bundle.languages[0] == "en" and side == "encoder":  # the word-order pairs, computed live
                assert "the same set of vectors for both sentences" in said

        # 2 · causal mask off: the output shown is the switched run, the changed words marked are the ones that
        # differ, and the caption says "changes" exactly when it did
        off = translate(causal_mask=False)
        said = page.open(
            "causal-off", "Translation ·", text=first, causal="0", overview_tab="Decoder masked self-attention"
        )
        assert f"\n{off.text or EMPTY}\n" in f"\n{said}\n"
        if off.text != trained.text:
            assert line_after(said, "As trained:") == (trained.text or EMPTY)
            assert line_after(said, "With causal mask off:") == (off.text or EMPTY)
            assert page.marked("As trained:", "With causal mask off:") == changed_words(trained.text, off.text)
        else:
            assert "As trained the translation is the same" in said
        changed = claims.first_changed_word(trained.text, off.text) is not None
        assert ("The output still changes" in said) == changed
        assert ("Here the output is the same as with the mask" in said) == (not changed)

        # 3 · one head switched off, and beam 4: the header is that run's translation
        ablated = translate(ablate=frozenset({("encoder", 0, 0)}))
        said = page.open("head-off", "Translation ·", text=first, ablate="encoder.1.1")
        assert f"\n{ablated.text or EMPTY}\n" in f"\n{said}\n"
        if ablated.text == trained.text:
            assert "As trained the translation is the same" in said
        else:
            assert line_after(said, "As trained:") == trained.text
        if "beam-4" not in skip:
            beam = translate(beam_size=4)
            said = page.open("beam-4", "Translation ·", text=first, beam="4")
            assert f"\n{beam.text or EMPTY}\n" in f"\n{said}\n" and "beam 4" in said

        # 4 · padding mask off on a batch of two: each translation shown is the batch's
        if "padding-off" not in skip:
            opts = core.InferenceOptions(padding_mask=False)
            texts = [
                one.text
                for one in bundle.translate_batch(
                    [first, second], options=opts, truncate=True, record=core.Record(qkv=False)
                )
            ]
            said = page.open("padding-off", "Translation 2:", page="masks", text=first, text2=second, padding="0")
            assert line_after(said, "Translation 1:") == (texts[0] or "∅")
            assert line_after(said, "Translation 2:") == (texts[1] or "∅")

        # 5 · a forced word: the alternative is the model's continuation after it, and "its own choice" is the
        # model's own piece at that step (it named the forced one)
        own = [int(i) for i in trained.trace["output.ids"]]
        if len(own) >= 3:
            step = 1
            candidate = next(int(i) for i in trained.trace["output.top_ids"][step] if int(i) != own[step])
            prefix = [*own[:step], candidate]
            alt = bundle.translate_from(first, prefix, truncate=True)
            said = page.open(
                "what-if", "What if step 2 were", page="steps", text=first, step="2", whatif=".".join(map(str, prefix))
            )
            assert re.search(r"What if step 2 were “[^”]*”: (.*)", said).group(1).strip() == (alt.text or "∅")
            # the caption names the words the alternative's highlights mark, or says there are none
            marks = page.marked("What if step 2 were")
            named = re.search(r"highlighted in green: (.*?)\. The steps", said)
            if marks:
                assert named and re.findall(r"“([^”]*)”", named.group(1)) == marks, (marks, said)
            else:
                assert named is None and "it has the same words as the model's translation" in said
            own_piece = trained.trace.piece(own[step])
            assert f"At step 2 the model's own choice was “{own_piece.replace('▁', '␣')}”" in said
            # the picker's placeholder names the model's own piece at this step (drawn a moment after the text)
            placeholders = page.tab.wait_for_function(
                """() => [...document.querySelectorAll('[data-testid="stMain"] input')]
                         .map(e => e.placeholder).filter(p => p.includes('its own choice')).join(' | ')""",
                timeout=20_000,
                polling=POLL,
            ).json_value()
            assert f"its own choice: “{own_piece.replace('▁', '␣')}”" in placeholders
            assert f"its own choice: “{alt.trace.piece(candidate).replace('▁', '␣')}”" not in placeholders
            assert (
                f"forced here: “{alt.trace.piece(candidate).replace('▁', '␣')}”" in placeholders
            )  # and the forced one
        # 6 · the Model map: the total it states is the model's own count of its tensors
        if "model-map" not in skip:
            said = page.open("model-map", "The blocks add up to", page="map", text=first)
            numel = sum(p.numel() for p in bundle.model.parameters())
            assert f"The blocks add up to {numel:,} parameters, the same as the model's own count" in said
        # 7 · the Compare page on a pair of sentences: where the translations part and each kind's sentence are core's
        if "compare" not in skip:
            other = translate(second)
            said = page.open("compare", "Head by head", page="compare", text=first, text_b=second, forced_b="0")
            assert claims_compare.outputs_note(trained.text, other.text) in said
            found = compare(trained.trace, other.trace)
            assert found.kinds, "the two runs share attention kinds to compare"
            for kind, change in found.kinds.items():
                assert claims_compare.kind_note(change, KINDS[kind].capitalize()) in said, kind
        # 8 · Why this word?'s logit lens and value zeroing: their sentences are core's, computed here
        if "lens" not in skip:
            lens = logit_lens(bundle, first)
            said = page.open("lens", "Logit lens: each decoder", page="explain", text=first, explain_tab="Logit lens")
            assert claims_explain.lens_note(lens.chosen, lens.first_top, lens.n_layers) in said
            zeroed, alti = value_zeroing(bundle, first), contributions(bundle, first)
            said = page.open("zeroing", "Layer by layer", page="explain", text=first, explain_tab="Value zeroing")
            rho = float(np.nanmean(rank_agreement(zeroed.source, alti.source_matrix)))
            assert claims_explain.zeroing_alti_note(rho) in said
            # why the first output word and not the model's runner-up there (the tab's default): core's sentence
            out_ids, t = list(trained.output_ids), 0
            chosen = trained.output_tokens[t]
            other = next(int(i) for i in trained.trace["output.top_ids"][t] if trained.trace.piece(int(i)) != chosen)
            src_ids = list(trained.trace["ids.src"])
            contrast = attribute(bundle, src_ids, out_ids, t, steps=32, contrast=other)
            said = page.open("contrast", "rather than", page="explain", text=first, explain_tab="Attribution")
            prefix = trained.tgt_tokens[: len(contrast.target_ig)]
            note = claims_explain.contrast_note(
                contrast, chosen, trained.trace.piece(other), trained.src_tokens, prefix
            )
            assert note.replace("\\", "") in said, (note, said[-600:])
        # 9 · sampling on the Steps page: a seeded draw from a link is core's draw with the same settings
        if "sample" not in skip:
            drawn = bundle.translate(first, truncate=True, sampling=Sampling(temperature=1.2, seed=4))
            said = page.open("sample", "The draw at step", page="steps", text=first, temperature="1.2", seed="4")
            assert f"\n{drawn.text or EMPTY}\n" in f"\n{said}\n"


def test_a_page_path_opened_directly_makes_no_failed_request(lab_server: tuple[str, Path], chromium: object) -> None:
    """/masks typed, reloaded or bookmarked: the page opens with the link's values, and the frontend's probe of
    ``/masks/_stcore/health`` (upstream streamlit#7074) no longer happens (viz_app/asgi.py answers the path)."""
    url, _ = lab_server
    failed: list[str] = []
    errors: list[str] = []
    with new_tab(chromium, "page-path") as tab:
        tab.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        for path, title in (("masks", "Masks"), ("steps/", "Step-by-step decoding")):
            tab.goto(f"{url}/{path}?{urlencode({'ckpt': 'tiny', 'text': 'A small test.'})}", timeout=120_000)
            tab.wait_for_function(
                "([t]) => (document.querySelector('[data-testid=\"stMain\"]')?.innerText || '').includes('Translation')"
                " && document.querySelector('h1')?.innerText.includes(t)",
                arg=[title],
                timeout=120_000,
                polling=POLL,
            )
            tab.wait_for_function(IDLE, timeout=120_000, polling=POLL)
            assert f"page={path.strip('/')}" in tab.url, tab.url  # the lab's own link to this view
            assert "text=A+small+test." in tab.url or "text=A%20small%20test." in tab.url, tab.url
    assert not failed, failed
    assert not [e for e in errors if "404" in e or "Failed to load" in e], errors
