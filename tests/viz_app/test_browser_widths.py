"""Every page whole on a projector (1024×768) and a laptop (1280×720), and at 1440×900, in a real browser: no text
cut off by its box or running past its figure, no figure labels drawn over each other, no page wider than the window
— and the presentation setting (viz_app/widgets/presentation.py) folds the sidebar away, enlarges the text and is
kept in the link. With ``make screenshots``, each page at 1024×768 is left in test-artifacts/width-1024-PAGE.png.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

import pytest
from conftest import POLL, new_tab, snapshot

import core
from viz_app.page_table import PAGE_ROWS

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
WIDTHS = ({"width": 1024, "height": 768}, {"width": 1280, "height": 720}, {"width": 1440, "height": 900})
SENTENCE = "Is there any tea left in the pot?"
# the page has run, and every chart on it has been drawn
DRAWN = """() =>
  document.querySelector('[data-testid="stApp"]')?.getAttribute('data-test-script-state') === 'notRunning'
  && document.querySelector('[data-testid="stMain"] h1')
  && [...document.querySelectorAll('[data-testid="stPlotlyChart"]')].every(c => c.querySelector('.main-svg'))"""
# What a reader could not read, as [kind, text, detail] rows:
# - 'cut': a text whose extent runs past a box that clips it (overflow other than visible, or an ellipsis), on the
#   page or in an open sidebar (a figure's own text is checked against its figure instead);
# - 'figure': a figure's title, annotation or tick label running past the figure's edge;
# - 'overlap': two of one figure's annotations drawn over each other;
# - 'scroll': the page (or its main column) wider than the window.
UNREADABLE = """() => {
  const out = [];
  const roots = [document.querySelector('[data-testid="stMain"]')];
  const side = document.querySelector('[data-testid="stSidebar"]');
  if (side && side.getBoundingClientRect().right > 10 && side.getAttribute('data-collapsed') !== 'true')
    roots.push(side);
  const clipped = new Map();  // the box that clips -> [the texts it cuts, how far past]
  for (const root of roots) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const text = node.textContent.trim();
      const el = node.parentElement;
      const skipped = 'svg, .katex-mathml, [data-testid="stDataFrame"], [data-testid="stTooltipContent"]';
      if (!text || el.closest(skipped)) continue;
      const range = document.createRange();
      range.selectNodeContents(node);
      const r = range.getBoundingClientRect();
      if (r.width < 1 || r.height < 1 || getComputedStyle(el).visibility === 'hidden') continue;
      for (let a = el; a && a !== root.parentElement; a = a.parentElement) {
        const cs = getComputedStyle(a);
        if (cs.overflowX === 'visible' && cs.textOverflow !== 'ellipsis') continue;
        const box = a.getBoundingClientRect();
        const past = Math.max(r.right - box.right, box.left - r.left);
        if (past > 1.5) {
          const [texts, most] = clipped.get(a) || [[], 0];
          texts.push(text);
          clipped.set(a, [texts, Math.max(most, past)]);
          break;
        }
      }
    }
  }
  for (const [box, [texts, past]] of clipped)
    out.push(['cut', texts.join(' ').slice(0, 80),
              `${Math.round(past)} px past its box (${box.className.toString().slice(0, 40) || box.tagName})`]);
  for (const gd of document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot')) {
    const plot = gd.getBoundingClientRect();
    if (plot.width < 1) continue;
    const texts = gd.querySelectorAll(
      '.gtitle, .annotation-text, .xtick text, .ytick text, .g-xtitle text, .g-ytitle text');
    for (const t of texts) {
      const r = t.getBoundingClientRect();
      if (r.width && (r.left < plot.left - 2 || r.right > plot.right + 2))
        out.push(['figure', t.textContent.slice(0, 80),
                  `${Math.round(Math.max(plot.left - r.left, r.right - plot.right))} px outside`]);
    }
    const notes = [...gd.querySelectorAll('.annotation-text')].map(t => [t.textContent, t.getBoundingClientRect()])
      .filter(([s, r]) => s.trim() && r.width);
    for (let i = 0; i < notes.length; i++) for (let j = i + 1; j < notes.length; j++) {
      const [a, ra] = notes[i], [b, rb] = notes[j];
      const w = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left);
      const h = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
      if (w > 2 && h > 2) out.push(['overlap', a.slice(0, 50), b.slice(0, 50)]);
    }
  }
  const main = document.querySelector('[data-testid="stMain"]');
  if (document.documentElement.scrollWidth > window.innerWidth + 1 || main.scrollWidth > main.clientWidth + 1)
    out.push(['scroll', 'the page', `${Math.max(document.documentElement.scrollWidth, main.scrollWidth)} px wide`]);
  return out;
}"""


@pytest.fixture(scope="module")
def opened(lab_server: tuple[str, Path]) -> tuple[str, str]:
    """The served app and the checkpoint a teacher meets first (the tiny one where there is none)."""
    url, root = lab_server
    name = core.default_checkpoint(REPO / "checkpoints")
    return url, name if name is not None and (root / name).exists() else "tiny"


def _open(tab: object, url: str, path: str, **params: str) -> None:
    tab.goto(f"{url}/{path}?{urlencode(params)}", timeout=120_000)
    tab.wait_for_function(DRAWN, timeout=120_000, polling=POLL)
    tab.wait_for_timeout(300)  # Plotly's last relayout


def test_every_page_is_whole_on_a_projector_and_a_laptop(opened: tuple[str, str], chromium: object) -> None:
    url, name = opened
    found: dict[str, list] = {}
    with new_tab(chromium, "widths", viewport=WIDTHS[0]) as tab:
        for row in PAGE_ROWS:
            path = "" if row.key == "overview" else row.key
            tab.set_viewport_size(WIDTHS[0])
            _open(tab, url, path, ckpt=name, text=SENTENCE)
            snapshot(tab, f"width-1024-{row.key}")
            for size in WIDTHS:
                if size is not WIDTHS[0]:  # the same page, resized: Plotly and the CSS follow the window
                    tab.set_viewport_size(size)
                    tab.wait_for_timeout(700)
                if problems := tab.evaluate(UNREADABLE):
                    found[f"{row.key} at {size['width']}×{size['height']}"] = problems
    assert not found, "\n".join(f"{where}: {p}" for where, problems in found.items() for p in problems)


def test_presentation_folds_the_sidebar_enlarges_text_and_stays_in_the_link(
    opened: tuple[str, str], chromium: object
) -> None:
    url, name = opened
    with new_tab(chromium, "presentation", viewport=WIDTHS[0]) as tab:
        _open(tab, url, "steps", ckpt=name, text=SENTENCE)
        sidebar = tab.locator('[data-testid="stSidebar"]')
        assert sidebar.get_attribute("data-collapsed") == "false"
        size = tab.evaluate("() => parseFloat(getComputedStyle(document.documentElement).fontSize)")
        # the first chart title's font size, once Plotly has drawn one
        title = (
            "() => { const t = document.querySelector('.js-plotly-plot .gtitle');"
            " return t && parseFloat(getComputedStyle(t).fontSize); }"
        )
        title_size = tab.wait_for_function(title, timeout=30_000, polling=POLL).json_value()
        tab.get_by_text("Presentation (projector)").click()
        tab.wait_for_function(
            "() => document.querySelector('[data-testid=\"stSidebar\"]').getAttribute('data-collapsed') === 'true'",
            timeout=30_000,
            polling=POLL,
        )
        tab.wait_for_function(DRAWN, timeout=60_000, polling=POLL)
        tab.wait_for_function(f"() => ({title})() > {title_size}", timeout=30_000, polling=POLL)
        assert tab.evaluate("() => parseFloat(getComputedStyle(document.documentElement).fontSize)") > size
        assert "present=1" in tab.url, tab.url
        # every chart across the main column's whole width, one under another
        widths = tab.evaluate(
            """() => { const main = document.querySelector('[data-testid="stMainBlockContainer"]').clientWidth;
                       return [...document.querySelectorAll('.js-plotly-plot')].map(p => p.clientWidth / main); }"""
        )
        assert widths and min(widths) > 0.85, widths
        snapshot(tab, "presentation-steps")
        problems = tab.evaluate(UNREADABLE)
        assert not problems, problems
        # the link opens in presentation: a new tab with ?present=1 starts with the sidebar folded
        link = tab.url
    with new_tab(chromium, "presentation-link", viewport=WIDTHS[0]) as tab:
        tab.goto(link, timeout=120_000)
        tab.wait_for_function(DRAWN, timeout=120_000, polling=POLL)
        assert tab.locator('[data-testid="stSidebar"]').get_attribute("data-collapsed") == "true"
