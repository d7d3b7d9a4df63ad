"""The Leak tab as a person sees it: a real TensorBoard, a real browser.

TensorBoard runs as a subprocess over a logdir written by real TensorFlow
loops, once with the Python multiplexer (--load_fast=false) and once with
the Rust data server (--load_fast=true); headless Chromium opens the
plugin's entry page (what TensorBoard puts in the tab's iframe).
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest_plugin as cp  # noqa: E402

pytestmark = pytest.mark.skipif(
    not os.path.exists(cp.CHROMIUM), reason=f"Chromium not found at {cp.CHROMIUM} (apt-get install chromium)"
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
READY = "[data-testid=leak-app][data-state=ready]"


@pytest.fixture(scope="module")
def browser(chromium):
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=chromium, args=cp.CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture(scope="module", params=[False, True], ids=["load_fast=false", "load_fast=true"])
def tensorboard(request, leak_logdir, tensorboard_server):
    with tensorboard_server(leak_logdir.path, load_fast=request.param) as board:
        yield board


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1360, "height": 1000})
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    try:
        yield page
    finally:
        context.close()


def open_tab(page, board):
    page.goto(f"{board.url}/data/plugin_entry.html?name=leak")
    page.wait_for_selector(READY, timeout=30_000)


def select_run(page, run):
    page.locator(f"[data-testid=run-item][data-run='{run}']").click()
    page.wait_for_selector(READY, timeout=30_000)


def check_monitor_runs_visible(board):
    runs = {row["run"] for row in board.get_json("/data/plugin/leak/runs")["runs"]}
    if cp.LEAKY not in runs:
        pytest.fail(
            f"TensorBoard ({'--load_fast=true, Rust data server' if board.load_fast else 'multiplexer'}) "
            f"lists no series written by tb_leak_plugin.Monitor (runs seen: {sorted(runs)}). "
            "tensorboard-data-server 0.7.2 silently drops DT_DOUBLE scalar tensors; the summary "
            "writer must write DT_FLOAT scalars for the Leak tab to work with --load_fast=true "
            "(TensorBoard's default when the data server is installed)."
        )


def test_every_point_is_kept(tensorboard):
    """The tab serves every point written (it reads the local files), under either load mode."""
    check_monitor_runs_visible(tensorboard)
    from tb_leak_plugin.eventfile import reader

    body = tensorboard.get_json(f"/data/plugin/leak/timeline?run={cp.LEAKY}&tag={cp.RSS_TAG}&points=10000")
    written = reader.load_run(cp.LEAKY, os.path.join(tensorboard.logdir, cp.LEAKY)).series[cp.RSS_TAG]
    assert body["total_points"] == len(written.steps) > 10


def test_verdicts_charts_and_ops(tensorboard, page, tmp_path):
    check_monitor_runs_visible(tensorboard)
    open_tab(page, tensorboard)
    leaky = page.locator(f"[data-testid=run-item][data-run='{cp.LEAKY}']")
    clean = page.locator(f"[data-testid=run-item][data-run='{cp.CLEAN}']")
    assert leaky.locator("[data-testid=verdict-badge]").inner_text() == "leak"
    assert clean.locator("[data-testid=verdict-badge]").inner_text() != "leak"
    first = page.locator("[data-testid=run-item]").first
    assert first.get_attribute("data-verdict") == "leak", "leaks are listed first"

    select_run(page, cp.LEAKY)
    assert page.locator("[data-testid=summary-run]").inner_text() == cp.LEAKY
    assert page.locator("[data-testid=run-summary] [data-testid=verdict-badge]").inner_text() == "leak"
    memory_chart = page.locator(f"[data-testid=chart][data-tag='{cp.TF_TAG}']")
    assert memory_chart.locator("path[data-role=series]").count() == 1
    path = memory_chart.locator("path[data-role=series]").get_attribute("d")
    assert path.count("L") > 50, "the line has its points"
    assert memory_chart.locator("[data-role=trend]").count() == 1
    assert memory_chart.locator("[data-role=band]").count() == 1
    assert page.locator("[data-testid=chart] path[data-role=series]").count() >= 3
    assert memory_chart.locator("svg.chart text").count() > 4, "axes are labelled"
    assert any(unit in memory_chart.inner_text() for unit in ("MiB", "GiB", "KiB"))

    # Hover read-out.
    memory_chart.scroll_into_view_if_needed()
    box = memory_chart.locator("rect.overlay").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)
    readout = memory_chart.locator("[data-testid=readout]")
    readout.wait_for(state="visible")
    assert "step" in readout.inner_text() and "MiB" in readout.inner_text()

    # The leak trace under the culprits: who holds the outputs, as text.
    chains = page.locator("[data-testid=culprits-table] [data-testid=trace-chain]")
    assert chains.count() >= 1
    hops = chains.first.locator("[data-testid=hop]").all_inner_texts()
    assert any("local `kept`" in hop for hop in hops), hops
    assert chains.first.locator("[data-testid=hop] *").count() == 0, "hops are plain text"

    ops = page.locator("[data-testid=ops-section]")
    table = ops.locator("[data-testid=ops-table]")
    table.wait_for()
    names = table.locator("[data-testid=op-name]").all_inner_texts()
    assert any("MatMul" in name for name in names), names
    page.mouse.move(5, 5)
    _screenshot(page, tmp_path, f"leak-tab{'-load-fast' if tensorboard.load_fast else ''}.png")

    # Wall-time axis.
    page.locator("[data-testid=x-toggle] [data-value=wall_time]").click()
    page.wait_for_selector(READY)
    labels = memory_chart.locator("svg.chart .axis text").all_text_contents()
    assert any(":" in label for label in labels), labels
    assert not page.errors, page.errors


def test_compare_overlays_runs_and_judges_their_difference_as_the_cli_does(tensorboard, page, leak_logdir):
    from tb_leak_plugin.analysis import compare as compare_lib
    from tb_leak_plugin.reporting import logdir as analyze

    runs = {r["run"]: r for r in analyze.analyze_logdir(leak_logdir.path, jobs=1).to_dict()["runs"]}
    forward = compare_lib.compare_runs(runs[cp.CLEAN], runs[cp.LEAKY])["verdict"]
    backward = compare_lib.compare_runs(runs[cp.LEAKY], runs[cp.CLEAN])["verdict"]
    assert forward == "regression" and backward != "regression"

    check_monitor_runs_visible(tensorboard)
    open_tab(page, tensorboard)
    for run in (cp.CLEAN, cp.LEAKY):  # the run checked first is the base
        page.locator(f"[data-testid=run-item][data-run='{run}'] input.compare-toggle").check()
    page.locator("[data-testid=compare-button]").click()
    page.wait_for_selector(READY)
    chart = page.locator("[data-testid=compare-card] [data-testid=chart]")
    assert chart.locator("path[data-role=series]").count() == 2
    legend = page.locator("[data-testid=legend]").inner_text()
    assert cp.LEAKY in legend and cp.CLEAN in legend
    card = page.locator("[data-testid=difference-card]")
    assert card.get_attribute("data-verdict") == forward
    assert page.locator("[data-testid=difference-runs]").inner_text() == f"{cp.CLEAN} → {cp.LEAKY}"
    assert "more in the candidate" in page.locator("[data-testid=difference-reason]").inner_text()
    page.locator("[data-testid=difference-swap]").click()
    page.wait_for_selector(READY)
    assert page.locator("[data-testid=difference-card]").get_attribute("data-verdict") == backward
    assert not page.errors, page.errors


def test_hostile_names_render_as_text(tensorboard, page):
    if tensorboard.load_fast:
        check_monitor_runs_visible(tensorboard)  # the hostile run is written like the Monitor's
    open_tab(page, tensorboard)
    item = page.locator("[data-testid=run-item]").filter(has_text="onerror")
    assert item.locator("[data-testid=run-name]").inner_text() == cp.XSS
    item.click()
    page.wait_for_selector(READY)
    assert page.locator("[data-testid=summary-run]").inner_text() == cp.XSS
    row = page.locator("[data-testid=object-row]").first
    assert row.locator("[data-testid=object-type]").inner_text() == cp.XSS
    assert row.get_attribute("data-growing") == "true"
    assert page.locator("img").count() == 0, "a name became markup"
    assert page.evaluate("() => window.__xss") is None
    assert not page.errors, page.errors


def test_a_leak_traced_while_it_trained_is_shown_with_its_holder(tensorboard, page):
    """A run's report that names a leak the watch traced and the run let go
    (``traced_earlier``, see test_typed_traces) shows its holder as hops, and
    names from the data stay text."""
    check_monitor_runs_visible(tensorboard)

    def patch(route):
        response = route.fetch()
        body = response.json()
        body["traced_earlier"] = [{"kind": "object_type", "name": "numpy.ndarray", "step": 120, "live": 300,
                                   "held_by": [{"path": ["train() local `kept` (t.py:9)", cp.XSS],
                                                "instances": 250, "of": 300}]}]
        route.fulfill(response=response, json=body)

    page.route(f"**/data/plugin/leak/report?run={cp.CLEAN}*", patch)
    open_tab(page, tensorboard)
    select_run(page, cp.CLEAN)
    entry = page.locator("[data-testid=traced-earlier] [data-testid=traced-earlier-entry]")
    assert entry.count() == 1
    assert "numpy.ndarray" in entry.inner_text() and "step 120" in entry.inner_text()
    hops = entry.locator("[data-testid=hop]").all_inner_texts()
    assert hops == ["train() local `kept` (t.py:9)", cp.XSS, "ndarray"], hops
    assert page.locator("img").count() == 0, "a name became markup"
    assert page.evaluate("() => window.__xss") is None
    assert not page.errors, page.errors


def test_empty_and_error_states(tensorboard, page):
    page.route("**/data/plugin/leak/runs", lambda route: route.fulfill(
        status=200, content_type="application/json", body='{"runs": []}'))
    open_tab(page, tensorboard)
    empty = page.locator("[data-testid=empty-state]")
    assert "Monitor(" in empty.inner_text() and "monitor.sample(step)" in empty.inner_text()
    page.unroute("**/data/plugin/leak/runs")
    page.route("**/data/plugin/leak/runs", lambda route: route.fulfill(status=500, body="boom"))
    page.goto(f"{tensorboard.url}/data/plugin_entry.html?name=leak")
    page.wait_for_selector("[data-testid=error]")
    assert "Could not load the runs" in page.locator("[data-testid=error]").inner_text()


def _screenshot(page, tmp_path, name):
    path = tmp_path / name
    # The tab scrolls inside its own panel: grow the viewport to show all of it.
    size = page.viewport_size
    height = page.evaluate("() => document.querySelector('[data-testid=content]').scrollHeight")
    page.set_viewport_size({"width": size["width"], "height": max(size["height"], min(height, 6000))})
    page.wait_for_timeout(200)
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(size)
    out = os.path.join(REPO, "test-output")
    os.makedirs(out, exist_ok=True)
    shutil.copy(path, os.path.join(out, name))

