"""WCAG 2.1 A and AA on both pages, as axe-core checks them (axe-playwright-python bundles axe-core; no network):
no violation of the wcag2a, wcag2aa, wcag21a and wcag21aa rules on the served page and on the static build, at
1280 and at 390 px, at the starting point and after each guided step of every guide. One browser; one page per
site, walked through every step (and every guide's tab) and checked in a window of each width, so each check
costs axe's own run and not a page load or an update.

The static page's walk is in test_accessibility_static_browser.py (a file of its own: the suite's two workers
take a file each, and the two walks are its longest). What axe cannot judge is tested beside it: each control's
keyboard focus is drawn; the log's scroll region takes the keyboard; the readouts are live regions; lane states are
not told by colour alone.
"""
from __future__ import annotations

import re

import pytest

from explorable.views.guide import GUIDES
from tests.explorable.served_app import FIRST_PAGE_TIMEOUT_MS, TIMEOUT_MS, skip_without_chromium

pytestmark = pytest.mark.browser

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
axe_sync = pytest.importorskip("axe_playwright_python.sync_playwright", reason="axe-playwright-python is not installed")
skip_without_chromium()
sync_api.expect.set_options(timeout=TIMEOUT_MS)

WCAG_21_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
WIDTHS = (1280, 390)
AXE = axe_sync.Axe()


# Two rules judge the page as a whole, not its state: its style sheets' orientation media queries, and media
# elements that play sound on their own. They take about 1.2 s of axe's 2 s a run, so the walks below apply them at
# the start and at each guide's last step, and between those check that no audio or video element appeared.
PAGE_WIDE = ("css-orientation-lock", "no-autoplay-audio")


def violations(page, whole: bool = True) -> list[str]:
    """axe-core's WCAG 2.1 A/AA violations on the page as it is now, one line each (rule, count, first targets);
    without `whole`, all but the PAGE_WIDE rules, and any audio or video element reported instead. (axe is put on
    the page once, and only the violations come back: axe-playwright-python's `run` does both on every call.)"""
    options = {"runOnly": {"type": "tag", "values": WCAG_21_AA}, "resultTypes": ["violations"]}
    found = []
    if not whole:
        options["rules"] = {rule: {"enabled": False} for rule in PAGE_WIDE}
        if page.locator("audio, video").count():
            found.append("an audio or video element appeared (no-autoplay-audio must judge it)")
    if not page.evaluate("typeof window.axe === 'object'"):
        page.evaluate(AXE.axe_script)
    result = page.evaluate("""options => axe.run(document, options).then(r => r.violations.map(v => ({
        id: v.id, help: v.help, nodes: v.nodes.map(n => ({target: n.target}))})))""", options)
    return found + [f"{v['id']} x{len(v['nodes'])}: {v['help']}; {[n['target'] for n in v['nodes'][:3]]}"
                    for v in result]


def open_page(browser, url: str, width: int):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    sync_api.expect(page.locator('[data-readout="throughput_tok_s"] .readout-value')).to_be_visible(
        timeout=FIRST_PAGE_TIMEOUT_MS)
    if "index.html" in url:
        page.evaluate("window.cbStatic.ready")
    page.locator(".curves canvas").first.wait_for()
    page.wait_for_timeout(500)
    return context, page


def settle(page, before: str) -> None:
    """Until the readouts have changed from `before` (when the step changes them) and the page has been quiet for
    a moment (the curves follow the readouts)."""
    readouts = page.locator(".run-readouts .readouts").first
    for _ in range(20):
        if readouts.text_content() != before:
            break
        page.wait_for_timeout(100)
    page.wait_for_timeout(600)


def laid_out(page) -> None:
    """Until the browser has laid the page out and painted it twice since now (a resize or an update applied)."""
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")


def at_each_width(page, where: str, whole: bool = True) -> list[str]:
    """axe's violations on the page as it is, in a window of each of WIDTHS (the same page, resized)."""
    found = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        laid_out(page)
        found += [f"{where}, {width} px: {v}" for v in violations(page, whole)]
    return found


def walk_the_guides(page, where: str, every: bool = True) -> list[str]:
    """axe's violations at the start and after every guided step of every guide the page has (by its tabs), at
    each of WIDTHS; without `every`, of the guides after the first only their first and last steps."""
    found = at_each_width(page, f"{where}, start")
    tabs = page.locator(".guide-tabs button")
    shown = [spec for spec in GUIDES if page.locator(f".{spec.css}-button").count()]
    for spec in shown:
        if tabs.count() > 1 and tabs.first.is_visible():
            tabs.filter(has_text=spec.label).click()
        buttons = page.locator(f".{spec.css}-button button")
        n = buttons.count()
        steps = range(n) if every or spec is shown[0] else sorted({0, n - 1})
        for i in steps:
            before = page.locator(".run-readouts .readouts").first.text_content()
            buttons.nth(i).click()
            # (a new state may wait its turn behind the page's compute budget: explorable.server.budget)
            sync_api.expect(page.locator(f".{spec.css}-text")).to_have_attribute("data-step", str(i + 1),
                                                                                   timeout=FIRST_PAGE_TIMEOUT_MS)
            settle(page, before)
            found += at_each_width(page, f"{where}, {spec.label} step {i + 1}", whole=i == steps[-1])
    return found


def test_the_served_page_meets_wcag_21_aa_at_the_start_and_after_every_guided_step(server, browser):
    context, page = open_page(browser, server, WIDTHS[0])
    try:
        assert page.locator(".guide-tabs button").count() == len(GUIDES)
        found = walk_the_guides(page, "served")
    finally:
        page.wait_for_timeout(300)
        context.close()
    assert found == [], "\n".join(found)


def test_open_tables_and_advanced_controls_meet_wcag_21_aa_too(server, browser):
    """What the guides do not open: every chart's data table, the advanced controls, traffic arriving."""
    context, page = open_page(browser, server + "?arrival=rate&request_rate=8", 1280)
    try:
        page.locator(".traffic-curve canvas").first.wait_for()
        for summary in page.locator(".data-table summary").all():
            summary.click()
        sync_api.expect(page.locator(".table-slot table")).to_have_count(4)
        page.locator(".advanced").first.get_by_text("Advanced").click()
        page.locator(".advanced select").first.wait_for()
        page.wait_for_timeout(600)
        assert violations(page) == []
        # Each table lists what its chart shows: the lanes one row per request, the curves every point.
        assert page.locator('[data-table="lanes"] tbody tr').count() == 256
        assert page.locator('[data-table="curves"] tbody tr').filter(has_text="(you are here)").count() == 2
    finally:
        page.wait_for_timeout(300)
        context.close()


def test_keyboard_focus_is_drawn_on_every_control_and_reaches_the_log(server, browser):
    context, page = open_page(browser, server, 1280)
    try:
        # Tab through the page: every element that takes the focus draws an outline (or a ring) for it.
        unmarked, reached = [], set()
        for _ in range(120):
            page.keyboard.press("Tab")
            seen = page.evaluate("""() => {
              let el = document.activeElement;
              while (el && el.shadowRoot && el.shadowRoot.activeElement) el = el.shadowRoot.activeElement;
              if (!el || el === document.body) return null;
              const s = getComputedStyle(el);
              const drawn = (s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2) || s.boxShadow !== 'none';
              return {drawn, what: el.className || el.tagName, log: el.classList.contains('terminal-body')};
            }""")
            if seen is None:
                continue
            reached.add(seen["what"])
            if not seen["drawn"]:
                unmarked.append(seen["what"])
            if seen["log"]:
                break
        assert any("terminal-body" in w for w in reached), f"the log was never reached by Tab: {sorted(reached)}"
        assert unmarked == [], f"focus not drawn on: {sorted(set(unmarked))}"
        # The readouts are polite live regions; the lanes' legend names a pattern for each kind of lost work.
        live = page.locator(".run-readouts").first.evaluate("el => el.getAttribute('aria-live')")
        assert live == "polite"
        patterns = page.locator(".legend .swatch").evaluate_all(
            "els => els.map(e => getComputedStyle(e).backgroundImage)")
        assert patterns[0] == patterns[1] == "none" and all(p != "none" for p in patterns[2:])
    finally:
        context.close()


def test_nothing_animates_for_a_reader_who_asked_for_less_motion(server, browser):
    """With `prefers-reduced-motion: reduce`, no element drawn on the page (in any shadow root) runs an animation or a
    transition longer than a frame (an element that is not drawn, such as Panel's unused scroll buttons, cannot)."""
    context = browser.new_context(viewport={"width": 390, "height": 800}, reduced_motion="reduce")
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    try:
        page.goto(server)
        sync_api.expect(page.locator('[data-readout="throughput_tok_s"] .readout-value')).to_be_visible(
            timeout=FIRST_PAGE_TIMEOUT_MS)
        moving = page.evaluate("""() => {
          const out = [], seconds = (t) => Math.max(...t.split(',').map((x) => parseFloat(x) * (x.includes('ms') ? 1e-3 : 1)));
          const walk = (root) => {
            for (const el of root.querySelectorAll('*')) {
              const s = getComputedStyle(el);
              const drawn = el.getClientRects().length > 0 && s.visibility !== 'hidden';
              const moves = (s.animationName !== 'none' && seconds(s.animationDuration) > 0.02) ||
                seconds(s.transitionDuration) > 0.02;
              if (drawn && moves) out.push(el.className || el.tagName);
              if (el.shadowRoot) walk(el.shadowRoot);
            }
          };
          walk(document);
          return out;
        }""")
        assert moving == [], f"still animated: {sorted(set(map(str, moving)))[:10]}"
    finally:
        page.wait_for_timeout(300)
        context.close()


LIVE_REGION_CHANGES_JS = """() => {
  const live = [];
  const walk = (root) => { for (const el of root.querySelectorAll('*')) {
    if (el.getAttribute('aria-live') && el.classList.contains('run-readouts')) live.push(el);
    if (el.shadowRoot) walk(el.shadowRoot); } };
  walk(document);
  window.__liveChanges = 0;
  for (const el of live) {  // the text sits in the region's shadow root (Panel's HTML pane)
    const observer = new MutationObserver(() => { window.__liveChanges += 1; });
    for (const node of [el, el.shadowRoot].filter(Boolean))
      observer.observe(node, {subtree: true, childList: true, characterData: true});
  }
  return live.length;
}"""


@pytest.mark.parametrize("site", ["server", "static_site"])
def test_the_readouts_live_region_changes_once_per_click(site, browser, request):
    """A screen reader says a polite live region's text each time it changes: one change per click (the whole
    update in one replacement of the readouts' text), not one per figure or per message."""
    context, page = open_page(browser, request.getfixturevalue(site), 1280)
    try:
        assert page.evaluate(LIVE_REGION_CHANGES_JS) == 1
        for label in ("64", "512"):  # stops the test's static grid holds too
            page.evaluate("window.__liveChanges = 0")
            before = page.locator(".run-readouts .readouts").first.text_content()
            page.locator(".stop-max_num_seqs button").filter(has_text=re.compile(rf"^\s*{label}\s*$")).click()
            settle(page, before)
            page.wait_for_timeout(1500)  # the curves' follow-up and anything else the click sets off
            assert page.evaluate("window.__liveChanges") == 1, label
    finally:
        page.wait_for_timeout(300)
        context.close()
