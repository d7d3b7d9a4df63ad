"""The Leak tab's HTTP routes, over a logdir written by real TensorFlow loops.

Data goes through TensorBoard's real data provider (the Python multiplexer)
and TensorBoard's own WSGI application, so routing, error mapping and
headers are the ones a user gets.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest_plugin as cp  # noqa: E402

from tb_leak_plugin.plugin import leak_plugin as plugin_lib  # noqa: E402
from tb_leak_plugin.plugin.downsample import downsample_indices  # noqa: E402

PREFIX = "/data/plugin/leak"

# Every file the process opens while `_OPENED` is a list (an audit hook can't be removed).
_OPENED = None


def _audit(event, args):
    if event == "open" and _OPENED is not None and args and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


@pytest.fixture(scope="module")
def served(leak_logdir, plugin_client):
    client, plugin = plugin_client(leak_logdir.path)
    return client, plugin


def get(client, path, **params):
    response = client.get(PREFIX + path, query_string=params)
    return response


def get_json(client, path, **params):
    response = get(client, path, **params)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.headers["Content-Type"].startswith("application/json")
    return json.loads(response.get_data(as_text=True))


# ---------------------------------------------------------------- runs and reports


def test_runs_lists_verdicts_leaks_first(served):
    client, _ = served
    body = get_json(client, "/runs")
    runs = {row["run"]: row for row in body["runs"]}
    assert {cp.LEAKY, cp.CLEAN, cp.XSS, cp.ODD, cp.LINKED} <= set(runs)
    assert runs[cp.LEAKY]["verdict"] == "leak"
    assert runs[cp.LEAKY]["growth_bytes_per_step"] > 100 * 1024  # 256 KiB kept per step
    assert runs[cp.CLEAN]["verdict"] != "leak"
    order = {"leak": 0, "inconclusive": 1, "no_leak": 2}
    ranks = [order[row["verdict"]] for row in body["runs"]]
    assert ranks == sorted(ranks), "leaks first, then inconclusive, then clean"
    for row in body["runs"]:
        assert set(row) >= {"run", "verdict", "confidence", "growth_bytes_per_step", "reason", "tags"}
        assert 0.0 <= row["confidence"] <= 1.0


def test_report_is_the_cli_report(served, leak_logdir):
    """The plugin and the CLI are views of one report (same points, same analysis)."""
    from tb_leak_plugin.reporting import logdir as analyze

    client, _ = served
    body = get_json(client, "/report", run=cp.LEAKY)
    cli = {r.run: r.to_dict() for r in analyze.analyze_logdir(leak_logdir.path).runs}
    assert body == json.loads(json.dumps(cli[cp.LEAKY]))
    assert body["verdict"] == "leak"
    assert {"run", "verdict", "confidence", "reason", "series", "culprits", "hints", "traces"} <= set(body)


def test_bad_plugin_data_is_skipped_with_a_warning(served):
    client, _ = served
    body = get_json(client, "/report", run=cp.ODD)
    assert "leak/bogus/series" not in {s["tag"] for s in body["series"]}
    assert any("leak/bogus/series" in w for w in body["warnings"])
    assert cp.RSS_TAG in {s["tag"] for s in body["series"]}


# ---------------------------------------------------------------- timeline


def test_timeline_points_and_trend_overlay(served):
    client, _ = served
    body = get_json(client, "/timeline", run=cp.LEAKY, tag=cp.TF_TAG)
    assert body["unit"] == "bytes" and body["x"] == "step"
    xs, ys = body["points"]["x"], body["points"]["y"]
    assert len(xs) == len(ys) == body["total_points"] > 10
    assert xs == sorted(xs) and all(isinstance(x, int) for x in xs)
    assert body["verdict"] == "leak"
    trend = body["trend"]
    assert trend is not None and len(trend["x"]) == 2
    assert trend["y"][1] > trend["y"][0]
    assert trend["low"][1] <= trend["y"][1] <= trend["high"][1]
    assert xs[0] <= trend["x"][0] < trend["x"][1] <= xs[-1]


def test_timeline_wall_time_axis(served):
    client, _ = served
    by_step = get_json(client, "/timeline", run=cp.LEAKY, tag=cp.TF_TAG)
    body = get_json(client, "/timeline", run=cp.LEAKY, tag=cp.TF_TAG, x="wall_time")
    xs = body["points"]["x"]
    assert body["x"] == "wall_time"
    assert all(isinstance(x, float) and x > 1.5e9 for x in xs)
    assert body["points"]["y"] == by_step["points"]["y"]
    assert xs[0] <= body["trend"]["x"][0] <= body["trend"]["x"][1] <= xs[-1]


def test_timeline_downsamples_on_request(served):
    client, _ = served
    body = get_json(client, "/timeline", run=cp.LEAKY, tag=cp.RSS_TAG, points=40)
    assert body["downsampled"] and len(body["points"]["x"]) <= 40


def test_downsampling_keeps_peaks_ends_and_order():
    rng = np.random.default_rng(0)
    values = np.cumsum(rng.normal(size=1_000_000)) + np.arange(1_000_000) * 0.01
    values[123_457] = 1e9  # a spike
    values[876_543] = -1e9  # a dip
    idx = downsample_indices(values, 2000)
    assert len(idx) <= 2000
    assert np.all(np.diff(idx) > 0)
    assert {0, 999_999, 123_457, 876_543} <= set(idx.tolist())
    short = downsample_indices(values[:50], 2000)
    assert short.tolist() == list(range(50))


@pytest.mark.parametrize("params, status", [
    ({"tag": cp.RSS_TAG}, 400),  # no run
    ({"run": cp.LEAKY}, 400),  # no tag
    ({"run": "no-such-run", "tag": cp.RSS_TAG}, 404),
    ({"run": cp.LEAKY, "tag": "leak/no/such"}, 404),
    ({"run": cp.LEAKY, "tag": cp.RSS_TAG, "x": "epoch"}, 400),
    ({"run": cp.LEAKY, "tag": cp.RSS_TAG, "points": "lots"}, 400),
    ({"run": cp.LEAKY, "tag": cp.RSS_TAG, "points": "3"}, 400),
])
def test_timeline_bad_parameters(served, params, status):
    client, _ = served
    response = get(client, "/timeline", **params)
    assert response.status_code == status
    assert response.headers["Content-Type"].startswith("text/plain")


@pytest.mark.parametrize("route", ["/report", "/objects", "/ops"])
def test_run_routes_need_a_known_run(served, route):
    client, _ = served
    assert get(client, route).status_code == 400
    assert get(client, route, run="nope").status_code == 404


# ---------------------------------------------------------------- objects, ops, compare


def test_objects_growing_type_first_and_names_are_data(served):
    client, _ = served
    body = get_json(client, "/objects", run=cp.XSS)
    assert body["run"] == cp.XSS
    first = body["types"][0]
    assert first["name"] == cp.XSS and first["growing"] is True
    assert first["growth_per_step"] == pytest.approx(3.0, rel=0.05)
    assert len(first["sparkline"]["step"]) == len(first["sparkline"]["count"]) <= plugin_lib.SPARKLINE_POINTS
    assert {t["name"] for t in body["types"]} == {cp.XSS, "builtins.dict"}
    assert next(t for t in body["types"] if t["name"] == "builtins.dict")["growing"] is False
    assert body["total"]["name"] == "tracked_objects"


def test_ops_of_the_profiled_leaky_run(served):
    client, _ = served
    body = get_json(client, "/ops", run=cp.LEAKY)
    assert set(body) == {"run", "has_traces", "ops", "sessions", "notes"}
    assert body["has_traces"] and body["sessions"]
    names = [op["op"] for op in body["ops"]]
    assert any("MatMul" in name for name in names), names
    top = body["ops"][0]
    assert top["retained_bytes"] >= 256 * 1024


def test_ops_without_a_trace_say_how_to_record_one(served):
    client, _ = served
    body = get_json(client, "/ops", run=cp.CLEAN)
    assert body["has_traces"] is False and body["ops"] == []
    assert any("profile_steps" in note for note in body["notes"])


def test_compare_overlays_runs(served):
    client, _ = served
    body = get_json(client, "/compare", runs=f"{cp.LEAKY},{cp.CLEAN}", tag=cp.TF_TAG)
    assert [s["run"] for s in body["series"]] == [cp.LEAKY, cp.CLEAN]
    assert body["unit"] == "bytes" and body["missing"] == []
    assert body["series"][0]["verdict"] == "leak"
    # Repeated run= parameters (names may hold commas); the XSS run lacks no rss.
    response = client.get(PREFIX + "/compare", query_string=[("run", cp.LEAKY), ("run", cp.XSS), ("tag", cp.RSS_TAG)])
    assert response.status_code == 200
    assert [s["run"] for s in json.loads(response.get_data(as_text=True))["series"]] == [cp.LEAKY, cp.XSS]


def test_compare_bad_parameters(served):
    client, _ = served
    assert get(client, "/compare", tag=cp.RSS_TAG).status_code == 400
    assert get(client, "/compare", runs=cp.LEAKY).status_code == 400
    assert get(client, "/compare", runs=f"{cp.LEAKY},nope", tag=cp.RSS_TAG).status_code == 404
    assert get(client, "/compare", runs=cp.LEAKY, tag="leak/no/such").status_code == 404
    body = get_json(client, "/compare", runs=f"{cp.LEAKY},{cp.XSS}", tag="leak/tf/CPU:0/bytes_in_use")
    assert body["missing"] == [cp.XSS]


def test_difference_judges_two_runs_as_the_cli_does(served):
    from tb_leak_plugin.analysis.compare import compare_runs

    client, _ = served
    body = get_json(client, "/difference", base=cp.CLEAN, candidate=cp.LEAKY)
    base = get_json(client, "/report", run=cp.CLEAN)
    candidate = get_json(client, "/report", run=cp.LEAKY)
    assert body == json.loads(json.dumps(compare_runs(base, candidate)))
    assert body["verdict"] == "regression" and body["base"] == cp.CLEAN


def test_difference_bad_parameters(served):
    client, _ = served
    assert get(client, "/difference", base=cp.CLEAN).status_code == 400
    assert get(client, "/difference", candidate=cp.CLEAN).status_code == 400
    assert get(client, "/difference", base=cp.CLEAN, candidate=cp.CLEAN).status_code == 400
    assert get(client, "/difference", base=cp.CLEAN, candidate="../nope").status_code == 404
    # A hostile run name is data, and the route keeps working after bad requests.
    body = get_json(client, "/difference", base=cp.XSS, candidate=cp.LEAKY)
    assert body["base"] == cp.XSS


# ---------------------------------------------------------------- safety


def test_hostile_names_come_back_as_data(served):
    client, _ = served
    runs = get_json(client, "/runs")["runs"]
    assert cp.XSS in [row["run"] for row in runs]
    report = get_json(client, "/report", run=cp.XSS)
    assert report["run"] == cp.XSS
    assert any(c["name"] == cp.XSS for c in report["culprits"])


@pytest.mark.parametrize("path", ["/index.js", "/model.js", "/views.js", "/chart.js", "/format.js",
                                  "/style.css", "/static/index.js", "/static/style.css"])
def test_static_assets_from_the_whitelist(served, path):
    client, _ = served
    response = client.get(PREFIX + path)
    assert response.status_code == 200
    expected = "text/css" if path.endswith(".css") else "text/javascript"
    assert response.headers["Content-Type"].startswith(expected)
    assert response.headers.get("X-Content-Type-Options") == "nosniff"
    assert response.get_data()


@pytest.mark.parametrize("path", [
    "/static/../plugin.py", "/static/%2e%2e/plugin.py", "/static/%2e%2e%2fplugin.py",
    "/static/..%2f..%2fsetup.py", "/static/..%5c..%5csetup.py", "/static/..\\..\\setup.py",
    "/static//etc/passwd", "/static/%2fetc%2fpasswd", "/static/index.js%00", "/static/INDEX.JS",
    "/static/", "/static/http_api.md", "/index.js/../../plugin.py",
])
def test_static_path_traversal_is_refused(served, path):
    client, _ = served
    assert client.get(PREFIX + path).status_code == 404


def test_run_names_cannot_reach_outside_the_logdir(served, leak_logdir):
    global _OPENED
    client, plugin = served
    logdir, outside = leak_logdir
    hostile = ["../outside", "%2e%2e%2foutside", "..%2foutside", outside, "/etc", "..\\outside",
               "linked/../../outside", "./../outside", "~", "leaky/../../outside"]
    _OPENED = []
    try:
        for name in hostile:
            for route in ("/report", "/ops", "/objects"):
                assert get(client, route, run=name).status_code == 404, (route, name)
            assert get(client, "/timeline", run=name, tag=cp.RSS_TAG).status_code == 404
        # A run whose profile folder links outside: listed, but its traces are never read.
        ops = get_json(client, "/ops", run=cp.LINKED)
        assert ops["has_traces"] is False
        opened = list(_OPENED)
    finally:
        _OPENED = None
    outside_real = os.path.realpath(outside)
    assert not [p for p in opened if os.path.realpath(p).startswith(outside_real)]
    known = {cp.LEAKY, cp.LINKED}
    assert plugin.run_directory("../outside", known | {"../outside"}) is None
    assert plugin.run_directory(outside, known | {outside}) is None
    assert plugin.run_directory("a\\..\\..\\x", {"a\\..\\..\\x"}) is None
    assert plugin.run_directory(cp.LEAKY, {cp.CLEAN}) is None  # not listed by the provider
    assert plugin.run_directory(cp.LEAKY, known) == os.path.realpath(os.path.join(logdir, cp.LEAKY))


# ---------------------------------------------------------------- wiring


def test_plugin_entry_page_and_metadata(served):
    client, plugin = served
    response = client.get("/data/plugin_entry.html?name=leak")
    assert response.status_code == 200
    assert 'import("./index.js")' in response.get_data(as_text=True)
    meta = plugin.frontend_metadata()
    assert meta.es_module_path == "/index.js" and meta.tab_name == "Leak"
    assert plugin.data_plugin_names() == ("leak",)
    listing = json.loads(client.get("/data/plugins_listing").get_data(as_text=True))
    assert listing["leak"]["enabled"] is True
    assert listing["leak"]["loading_mechanism"]["type"] == "IFRAME"


def test_fix_flags_bounds_tensorboards_copy_and_respects_the_user(leak_logdir):
    from tensorboard import context, program
    from tensorboard.backend.event_processing import data_ingester
    from tensorboard.plugins.core import core_plugin

    def configure(*args):
        board = program.TensorBoard(plugins=[core_plugin.CorePluginLoader, plugin_lib.LeakPluginLoader])
        board.configure(argv=["tensorboard", "--logdir", leak_logdir.path, *args])
        return board.flags

    flags = configure()
    assert flags.samples_per_plugin == {"leak": plugin_lib.LOCAL_SAMPLES_PER_TAG}
    assert configure("--samples_per_plugin=leak=50").samples_per_plugin == {"leak": 50}
    assert configure("--samples_per_plugin=images=3").samples_per_plugin == {"images": 3, "leak": plugin_lib.LOCAL_SAMPLES_PER_TAG}

    # The Python multiplexer as `tensorboard --load_fast=false` builds it from
    # the flags a remote logdir gets (the sample the tab then reads).
    flags = configure("--reload_task=blocking", "--reload_interval=0",
                      f"--samples_per_plugin=leak={plugin_lib.DEFAULT_SAMPLES_PER_TAG}")
    ingester = data_ingester.LocalDataIngester(flags)
    ingester.start()
    provider = ingester.data_provider
    data = provider.read_scalars(context.RequestContext(), experiment_id="", plugin_name="leak",
                                 downsample=10**6)
    from tb_leak_plugin.eventfile import reader

    # Every point the monitor wrote (its cheap samples, at defaults) is served.
    written = reader.load_run(cp.LEAKY, os.path.join(leak_logdir.path, cp.LEAKY)).series[cp.RSS_TAG]
    assert len(written.steps) > 10
    assert len(data[cp.LEAKY][cp.RSS_TAG]) == len(written.steps)


def test_loader_survives_a_missing_dependency(monkeypatch):
    from tensorboard.plugins import base_plugin

    monkeypatch.setitem(sys.modules, "tb_leak_plugin.reporting.logdir", None)
    context = base_plugin.TBContext(logdir="/nonexistent", data_provider=None)
    assert plugin_lib.LeakPluginLoader().load(context) is None


def test_frontend_directory_is_found():
    directory = plugin_lib.frontend_directory()
    assert directory is not None
    for name in plugin_lib.STATIC_FILES:
        assert os.path.isfile(os.path.join(directory, name)), name


# ---------------------------------------------------------------- cache


def test_reports_are_cached_and_rebuilt_when_data_changes(leak_logdir, tmp_path, plugin_client):
    from tb_leak_plugin.reporting import logdir as analyze
    from tb_leak_plugin.metadata import SeriesInfo
    from tb_leak_plugin.summary import EventWriter

    logdir = tmp_path / "logs"
    shutil.copytree(os.path.join(leak_logdir.path, cp.ODD), logdir / "run")
    calls = []

    def builder(run, with_traces=True):
        calls.append(run.name)
        return analyze.report_for_run(run, with_traces=with_traces)

    client, plugin = plugin_client(str(logdir), report_builder=builder)
    first = get_json(client, "/report", run="run")
    assert get_json(client, "/report", run="run") == first
    get_json(client, "/timeline", run="run", tag=cp.RSS_TAG)
    assert calls == ["run"], "served from the cache while the data is unchanged"

    writer = EventWriter(str(logdir / "run"))
    rss = SeriesInfo("process", "rss_bytes", "bytes")
    for step in range(60, 90):
        writer.write(step, [(rss, 300e6)])
    writer.close()
    plugin._provider._multiplexer.Reload()
    second = get_json(client, "/report", run="run")
    assert calls == ["run", "run"]
    assert second["samples"] == first["samples"] + 30


def test_concurrent_requests_build_each_report_once(leak_logdir, plugin_client):
    from tb_leak_plugin.reporting import logdir as analyze

    calls = []
    lock = threading.Lock()

    def builder(run, with_traces=True):
        with lock:
            calls.append(run.name)
        return analyze.report_for_run(run, with_traces=with_traces)

    client, plugin = plugin_client(leak_logdir.path, report_builder=builder, revalidate_secs=60)
    results, errors = [], []

    def hit():
        try:
            from werkzeug.test import Client

            local = Client(client.application)
            results.append(local.get(PREFIX + "/report", query_string={"run": cp.LEAKY}).status_code)
            results.append(local.get(PREFIX + "/runs").status_code)
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=hit) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and results == [200] * 12
    assert sorted(calls) == sorted(set(calls)), f"a run's report was built twice: {calls}"


def test_a_run_whose_analysis_fails_does_not_hide_the_others(leak_logdir, plugin_client):
    from tb_leak_plugin.reporting import logdir as analyze

    def builder(run, with_traces=True):
        if run.name == cp.ODD:
            raise RuntimeError("boom")
        return analyze.report_for_run(run, with_traces=False)

    client, _ = plugin_client(leak_logdir.path, report_builder=builder)
    rows = {row["run"]: row for row in get_json(client, "/runs")["runs"]}
    assert rows[cp.ODD]["verdict"] == "error" and "boom" in rows[cp.ODD]["reason"]
    assert rows[cp.LEAKY]["verdict"] == "leak"
    assert list(rows)[-1] == cp.ODD, "failed runs are listed last"
