"""The HTML report in a real browser: headless Chromium (Debian's ``chromium`` and ``chromium-driver``) driven
through Selenium. It renders without console errors, its block table has a row per block, sorting reorders
it, the filter sums what it shows, a click opens a block, the charts have drawn; a screenshot of each page
is kept in ``build/test-artifacts/`` (or ``$MHLO_COST_TEST_ARTIFACTS``).

Skipped, with the reason, only where no browser can be had (``.ci/run`` installs one where it is missing).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from html_pages import ROOT, csv_rows, dump, same_value
from mhlo_cost.cli import main

ARTIFACTS = Path(os.environ.get("MHLO_COST_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts"))


def _chrome():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("no browser: selenium is not installed (pip install -e '.[test]')")
    binary = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    driver = shutil.which("chromedriver") or next(
        (p for p in ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver") if Path(p).exists()), None)
    if binary is None or driver is None:
        pytest.skip("no browser: Chromium and chromedriver are not installed "
                    "(Debian: apt-get install chromium chromium-driver; .ci/run does it)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
              "--window-size=1280,900", "--disable-extensions", "--no-first-run"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)


@pytest.fixture(scope="module")
def browser():
    b = _chrome()
    yield b
    b.quit()


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """Two pages: STDiT3 (small) on 4 devices with the fused H100 estimate; the GPT example, counts only."""
    d = tmp_path_factory.mktemp("html_browser")
    tp4 = dump(d / "tp4.mlir", "--parallel", "megatron", "--devices", "4")
    out = {}
    for name, src, extra in (("stdit3_tp4", tp4, ["--hardware", "h100", "--fuse", "elementwise"]),
                             ("gpt_small", ROOT / "examples" / "gpt_small.mlir", [])):
        page = d / f"{name}.html"
        assert main(["report", str(src), "--format", "html", "-o", str(page), "-q", *extra]) == 0
        out[name] = (page, src, extra)
    return out


def _csv(capsys, src, extra) -> tuple[list[str], list[list[str]]]:
    assert main(["report", str(src), "--by", "block", "--format", "csv", "-q", *extra]) == 0
    return csv_rows(capsys.readouterr().out)


def _open(browser, page: Path) -> list[dict]:
    browser.get(page.resolve().as_uri())
    return [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]


def _column(browser, col: int) -> list[str]:
    return browser.execute_script(
        "return Array.from(document.querySelectorAll('#blocks tbody tr:not(.detail)'))"
        ".filter(r => !r.hidden).map(r => r.cells[arguments[0]].getAttribute('data-v'))", col)


@pytest.mark.parametrize("name", ["stdit3_tp4", "gpt_small"])
def test_renders_without_errors_rows_and_charts(browser, pages, capsys, name):
    page, src, extra = pages[name]
    assert _open(browser, page) == []
    head, rows = _csv(capsys, src, extra)
    assert len(_column(browser, 0)) == len(rows) - 1  # one row per block and group; TOTAL in the footer
    assert browser.execute_script("return document.querySelector('#blocks tfoot tr.total').cells[0].textContent") \
        == "TOTAL"
    charts = browser.execute_script(
        "return Array.from(document.querySelectorAll('svg.chart')).map(s => {const r = s.getBoundingClientRect();"
        " return [s.getAttribute('aria-label'), r.width, r.height, s.querySelectorAll('rect,circle,polyline').length]})")
    assert len(charts) >= 2 and all(w > 300 and h > 50 and n > 0 for _, w, h, n in charts), charts
    bars = browser.execute_script(
        "return Array.from(document.querySelectorAll('g.bar')).map(g => g.getBoundingClientRect().height)")
    assert len(bars) == len(rows) - 1 and min(bars) > 0
    if extra:  # the roofline's points have drawn, with a size
        pts = browser.execute_script(
            "return Array.from(document.querySelectorAll('circle.pt')).map(c => c.getBoundingClientRect().width)")
        assert pts and min(pts) > 0
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1280, min(height, 8000))
    shot = ARTIFACTS / f"html_report_{name}.png"
    assert browser.save_screenshot(str(shot))
    browser.set_window_size(1280, 900)
    assert shot.stat().st_size > 20_000


def test_sorting_reorders_the_table(browser, pages, capsys):
    page, src, extra = pages["stdit3_tp4"]
    _open(browser, page)
    head, rows = _csv(capsys, src, extra)
    col = head.index("vector_flops")
    before = _column(browser, col)
    header = browser.find_elements("css selector", "#blocks thead th")[col]
    header.click()
    after = _column(browser, col)
    assert after != before and [int(v) for v in after] == sorted((int(v) for v in before), reverse=True)
    header.click()
    assert [int(v) for v in _column(browser, col)] == sorted(int(v) for v in before)
    browser.find_elements("css selector", "#blocks thead th")[0].click()  # text: in name order, numbers as numbers
    names = _column(browser, 0)
    assert names.index("spatial_blocks.0") < names.index("spatial_blocks.1") < names.index("temporal_blocks.0")
    assert browser.execute_script("return document.querySelector('#blocks tfoot tr.total').hidden") is False


def test_filter_sums_the_rows_it_shows(browser, pages, capsys):
    page, src, extra = pages["stdit3_tp4"]
    _open(browser, page)
    head, rows = _csv(capsys, src, extra)
    box = browser.find_element("css selector", '.filter[data-for="blocks"]')
    box.send_keys("temporal")
    temporal = [r for r in rows if r[head.index("kind")] == "temporal"]
    assert len(_column(browser, 0)) == len(temporal) == 2
    shown = browser.execute_script(
        "const r = document.querySelector('#blocks tfoot tr.shown'); return [r.hidden, "
        "Array.from(r.cells).map(c => c.getAttribute('data-v'))]")
    assert shown[0] is False
    for c in ("gemm_flops", "comm_bytes", "ops"):  # exact integer sums, as Python adds them
        assert shown[1][head.index(c)] == str(sum(int(r[head.index(c)]) for r in temporal))
    box.clear()
    box.send_keys("/^spatial_blocks\\.1$/")
    assert _column(browser, 0) == ["spatial_blocks.1"]


def test_click_opens_parts_and_top_ops(browser, pages):
    page, _, _ = pages["stdit3_tp4"]
    _open(browser, page)
    row = browser.find_element("css selector", '#blocks tbody tr[data-key="spatial_blocks.0"]')
    row.click()
    detail = browser.execute_script(
        "const d = document.querySelector('#blocks tr.detail'); return d && [d.previousElementSibling.dataset.key,"
        " d.querySelectorAll('table.mini').length, d.querySelectorAll('table.ops tbody tr').length, d.textContent]")
    assert detail[0] == "spatial_blocks.0" and detail[1] == 2 and detail[2] == 10
    assert "parts of spatial_blocks.0" in detail[3] and "fused kernels" in detail[3]
    row.click()
    assert browser.execute_script("return document.querySelectorAll('#blocks tr.detail').length") == 0
    # A bar of the chart opens its block in the table.
    browser.execute_script("document.querySelector('g.bar[data-block=\"temporal_blocks.1\"]')"
                           ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")
    assert browser.execute_script("const d = document.querySelector('#blocks tr.detail');"
                                  " return d && d.previousElementSibling.dataset.key") == "temporal_blocks.1"
    # A link to one block: report.html#block=NAME opens it.
    browser.get("about:blank")
    browser.get(page.resolve().as_uri() + "#block=temporal_blocks.0")
    assert browser.execute_script("return Array.from(document.querySelectorAll('#blocks tr.detail'))"
                                  ".map(d => d.previousElementSibling.dataset.key)") == ["temporal_blocks.0"]


def test_hover_and_csv_of_the_rows(browser, pages, capsys):
    from selenium.webdriver import ActionChains

    page, src, extra = pages["stdit3_tp4"]
    _open(browser, page)
    point = browser.find_element("css selector", "circle.pt")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", point)
    ActionChains(browser).move_to_element(point).perform()
    tip = browser.find_element("id", "tip")
    assert tip.is_displayed() and "FLOP/B" in tip.text
    text = browser.execute_script("return window.mhloCost.csv(document.getElementById('blocks'))")
    mine_head, mine = csv_rows(text)
    head, rows = _csv(capsys, src, extra)
    assert mine_head == head and len(mine) == len(rows)
    assert all(same_value(a, b) for r1, r2 in zip(mine, rows) for a, b in zip(r1, r2))
    assert _open(browser, page) == []
