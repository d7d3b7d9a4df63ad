"""Hostile data: a TF_CONFIG that cannot be recorded, leak traces with NaN,
deep nesting or huge fields, a task identity claiming millions of tasks,
summaries dropped while a remote store hangs, and bidirectional controls
in names.

Every test here failed before its fix. Logdirs are written with the
TF-free EventWriter (and the metadata module's own identity and held-by
formats); the file runs in seconds on 2 cores, apart from the Keras
callback test (one TensorFlow import) and the browser check (Chromium).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time

import numpy as np
import pytest

from tb_leak_plugin import metadata
from tb_leak_plugin.eventfile import reader
from tb_leak_plugin.metadata import HELD_BY_FORMAT, HELD_BY_GROUP, SeriesInfo
from tb_leak_plugin.reporting import cli
from tb_leak_plugin.summary import EventWriter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest_plugin as cp  # noqa: E402

RSS = SeriesInfo("process", "rss_bytes", "bytes")
TRACKED = SeriesInfo("gc", "tracked_objects", "count")
LEAKY_TYPE = "mymod.Leaky"
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"
BIDI_RE = re.compile("[\u200e\u200f\u202a-\u202e\u2066-\u2069]")
FRONTEND = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "frontend")


def _strict_json(text: str):
    """Parse ``text`` as strict JSON (RFC 8259: no NaN, no Infinity)."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def write_run(run_dir: str, steps: int = 120, leaky: bool = True, seed: int = 0, type_name: str | None = LEAKY_TYPE,
              held_detail: str | None = None, identity: dict | None = None) -> None:
    """A run: RSS (growing when ``leaky``), a live-object count of
    ``type_name`` growing with it, a ``held_by`` trace point whose plugin
    data is ``held_detail`` (any text) and a task identity series."""
    rng = np.random.default_rng(seed)
    writer = EventWriter(run_dir)
    objects = SeriesInfo("objects", "live_count", "count", type_name) if type_name else None
    task = metadata.task_series_info(identity) if identity else None
    for step in range(steps):
        sample = [(RSS, 2e8 + (1e6 * step if leaky else 0.0) + rng.normal(0, 20_000)),
                  (TRACKED, 9e4 + rng.normal(0, 2))]
        if objects is not None:
            sample.append((objects, 10.0 + (3 * step if leaky else 0)))
        if task is not None and step in (0, steps - 1):
            sample.append((task, float(identity["task_index"])))
        if held_detail is not None and step == steps - 10:
            held = SeriesInfo(HELD_BY_GROUP, "t0", "instances", f"object_type:{type_name}"[:200], detail=held_detail)
            sample.append((held, 32.0))
        writer.write(step, sample, wall_time=1_700_000_000 + step)
    writer.close()


def trace_detail(**fields) -> dict:
    detail = {"format": HELD_BY_FORMAT, "culprit": {"kind": "object_type", "name": LEAKY_TYPE},
              "step": 110, "live": 340, "new": 300, "new_since_step": 10, "traced": 32, "found": 32,
              "seconds": 0.05, "complete": True,
              "held_by": [{"path": ["train() local `history` (train.py:57)", "list"], "instances": 300,
                           "sampled": 32}]}
    detail.update(fields)
    return detail


def run_cli(capsys, *args):
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def runs_by_name(report: dict) -> dict:
    return {run["run"]: run for run in report["runs"]}


def held_by_of(run: dict) -> list:
    return [c["details"]["held_by"] for c in run["culprits"] if (c.get("details") or {}).get("held_by")]


# ------------------------------------------------- 8: TF_CONFIG not recordable


HOSTILE_TF_CONFIGS = {
    "index beyond int32 (sparse cluster)": {"cluster": {"worker": {"4294967296": "a:1", "0": "b:1"}},
                                            "task": {"type": "worker", "index": 4294967296}},
    "index beyond int32 (evaluator)": {"cluster": {"chief": ["a:1"]}, "task": {"type": "evaluator", "index": 2**40}},
    "lone surrogate in the task type": {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker\ud800",
                                                                                       "index": 0}},
    "lone surrogate in a cluster key": {"cluster": {"worker\udfff": ["a:1", "b:1"], "chief": ["c:1"]},
                                        "task": {"type": "chief", "index": 0}},
}


@pytest.mark.parametrize("config", list(HOSTILE_TF_CONFIGS.values()), ids=list(HOSTILE_TF_CONFIGS))
def test_monitor_with_an_unrecordable_tf_config_logs_once_and_writes_one_run(tmp_path, monkeypatch, caplog, config):
    from tb_leak_plugin import Monitor

    monkeypatch.setenv("TF_CONFIG", json.dumps(config))  # json.dumps writes a lone surrogate as \ud800
    with caplog.at_level(logging.WARNING, logger="tb_leak_plugin"):
        monitor = Monitor(str(tmp_path), probes=("python", "gc"))
        for step in range(3):
            monitor.sample(step)
        monitor.close()
    assert monitor.logdir == str(tmp_path) and monitor.task is None
    notices = [r.getMessage() for r in caplog.records if "TF_CONFIG" in r.getMessage()]
    assert len(notices) == 1 and "single run" in notices[0], notices
    notices[0].encode("utf-8")  # the message itself can be logged anywhere
    assert list(reader.discover_runs(str(tmp_path))) == ["."]


def test_leak_callback_with_an_unrecordable_tf_config_starts(tmp_path, monkeypatch, caplog):
    pytest.importorskip("tensorflow")
    from tb_leak_plugin.keras import LeakCallback

    monkeypatch.setenv("TF_CONFIG", json.dumps(HOSTILE_TF_CONFIGS["index beyond int32 (evaluator)"]))
    callback = LeakCallback(str(tmp_path), probes=("python",))
    with caplog.at_level(logging.WARNING, logger="tb_leak_plugin"):
        callback.on_train_begin()
        callback.on_train_batch_end(0)
        callback.on_train_end()
    assert sum("TF_CONFIG" in r.getMessage() for r in caplog.records) == 1
    assert list(reader.discover_runs(str(tmp_path))) == ["."]


# ------------------------------------------------ 9, 10, 11: hostile leak traces


NAN_DETAIL = json.dumps(trace_detail(step=float("nan"), live=float("inf"), new=float("-inf"),
                                     seconds=float("nan"), traced=float("nan")))
DEEP_DETAIL = json.dumps(trace_detail())[:-1] + ', "x": ' + "[" * 50_000 + "]" * 50_000 + "}"
HUGE = 2_000_000
BIG = 200_000
HUGE_DETAIL = json.dumps(trace_detail(
    step="9" * HUGE, live="L" * BIG, seconds="s" * BIG, complete="c" * BIG, new_since_step=[0] * 10_000,
    held_by=[{"path": ["H" * BIG, "list"] + ["hop"] * 20_000, "instances": 300, "sampled": "x" * BIG}]
    + [{"path": ["p"], "instances": 1}] * 20_000))


@pytest.fixture(scope="module")
def trace_logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("traces")
    write_run(str(root / "nan"), seed=1, held_detail=NAN_DETAIL)
    write_run(str(root / "deep"), seed=2, held_detail=DEEP_DETAIL)
    write_run(str(root / "huge"), seed=3, held_detail=HUGE_DETAIL)
    write_run(str(root / "clean"), leaky=False, seed=4)
    return str(root)


def test_nan_and_infinity_in_a_trace_give_strict_json_and_every_run(trace_logdir, capsys):
    code, out, err = run_cli(capsys, "analyze", trace_logdir, "--run", "^(nan|clean)$", "--no-traces",
                             "--format", "json")
    assert code == 0, err
    runs = runs_by_name(_strict_json(out))
    assert set(runs) == {"nan", "clean"}
    nan = runs["nan"]
    assert nan["verdict"] == "leak"
    [held] = held_by_of(nan)  # the trace is still read: its paths are fine
    assert held[0]["path"][0] == "train() local `history` (train.py:57)"
    [traced] = [c for c in nan["culprits"] if c["details"].get("trace")]
    assert traced["details"]["trace"]["step"] is None and traced["details"]["trace"]["seconds"] is None
    assert traced["details"]["trace"]["live"] is None and traced["details"]["trace"]["new"] is None
    code, text, _ = run_cli(capsys, "analyze", trace_logdir, "--run", "^nan$", "--no-traces")
    assert code == 0 and "held by: train() local `history` (train.py:57) → list → Leaky" in text


def test_a_trace_nested_50000_deep_is_skipped_with_a_warning(trace_logdir, capsys):
    code, out, err = run_cli(capsys, "analyze", trace_logdir, "--run", "^deep$", "--no-traces", "--format", "json")
    assert code == 0, err
    [run] = _strict_json(out)["runs"]
    assert run["verdict"] == "leak", run["warnings"]  # the run is analysed, its leak shown
    assert not any("could not be analysed" in w for w in run["warnings"]), run["warnings"]
    assert any("nested deeper than" in w and "skipped" in w for w in run["warnings"]), run["warnings"]
    client, _ = cp.plugin_client(trace_logdir)
    response = client.get("/data/plugin/leak/report", query_string={"run": "deep"})
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    assert json.loads(response.get_data(as_text=True))["verdict"] == "leak"


def test_trace_fields_are_checked_and_bounded_in_every_output(trace_logdir, capsys):
    outputs = {}
    for form in ("json", "text", "markdown"):
        code, out, err = run_cli(capsys, "analyze", trace_logdir, "--run", "^huge$", "--no-traces", "--format", form)
        assert code == 0, err
        outputs[form] = out
    client, _ = cp.plugin_client(trace_logdir)
    response = client.get("/data/plugin/leak/report", query_string={"run": "huge"})
    assert response.status_code == 200
    outputs["/report"] = response.get_data(as_text=True)
    for name, out in outputs.items():
        assert len(out) < 100_000, (name, len(out))
        assert "9" * 400 not in out and "H" * 400 not in out and "x" * 400 not in out, name
    [run] = _strict_json(outputs["json"])["runs"]
    assert run["verdict"] == "leak"
    [held] = held_by_of(run)
    assert len(held) <= 5 and all(len(entry["path"]) <= 16 for entry in held)
    assert all(len(hop) <= 300 for entry in held for hop in entry["path"])
    assert all(entry["sampled"] is None or isinstance(entry["sampled"], int) for entry in held)
    [traced] = [c for c in run["culprits"] if c["details"].get("trace")]
    trace = traced["details"]["trace"]
    assert trace["step"] is None and trace["live"] is None and trace["seconds"] is None
    assert trace["complete"] is None and trace["new_since_step"] is None


def test_read_traces_bounds_each_field():
    from tb_leak_plugin.analysis.holders import read_traces
    from tb_leak_plugin.analysis.series import Series

    def series(detail, name="t0"):
        return Series.from_points(f"leak/held_by/x/{name}", SeriesInfo("held_by", name, "instances", "x",
                                                                       detail=detail), [1], [0.0], [1.0])

    warnings = []
    traces = read_traces([series(json.dumps(trace_detail(step=True, traced=-5, found=10**30, seconds=1e999))),
                          series("[" * 30 + "]" * 30, "t1"), series('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[["}', "t2"),
                          series(json.dumps(trace_detail(format=True)), "t3")], warnings)
    trace = traces[f"object_type:{LEAKY_TYPE}"]
    assert (trace["step"], trace["traced"], trace["found"], trace["seconds"]) == (None, None, None, None)
    assert any("nested deeper" in w for w in warnings)  # t1
    # t2: brackets inside a string are text, not nesting; t3: True is not format 1.
    assert sum("unknown or newer format" in w for w in warnings) == 2, warnings
    warnings = []
    assert read_traces([series(json.dumps(trace_detail(pad="x" * (5 << 20))))], warnings) == {}
    assert any("too large" in w for w in warnings)


# ------------------------------------------------ 12: a claimed cluster size


def identity(task_type="worker", index=0, counts=None, cluster_id="c0ffee"):
    counts = counts if counts is not None else {"worker": 2}
    return {"task_type": task_type, "task_index": index, "cluster_size": min(sum(counts.values()), 2**31 - 1),
            "host": "h", "pid": 1, "cluster_id": cluster_id, "task_counts": counts, "run_named_by": "tf_config"}


@pytest.fixture(scope="module")
def cluster_logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("clusters")
    write_run(str(root / "million" / "worker-0"), seed=1, identity=identity(counts={"worker": 1_000_000}))
    write_run(str(root / "hundred_million" / "worker-3"), seed=2,
              identity=identity(index=3, counts={"worker": 100_000_000}, cluster_id="bad"))
    many_types = {f"type{i}": 1 for i in range(5000)}
    many_types["worker"] = 2
    write_run(str(root / "many_types" / "worker-0"), seed=3, identity=identity(counts=many_types, cluster_id="m"))
    write_run(str(root / "innocent"), leaky=False, seed=4)
    return str(root)


def test_a_claimed_cluster_size_costs_little_in_the_cli(cluster_logdir, capsys):
    for form in ("json", "text", "markdown"):
        started = time.monotonic()
        code, out, err = run_cli(capsys, "analyze", cluster_logdir, "--no-traces", "--jobs", "1", "--format", form)
        assert code == 0, err
        assert time.monotonic() - started < 30
        assert len(out) < 200_000, (form, len(out))
        if form == "json":
            report = _strict_json(out)
            assert set(runs_by_name(report)) == {"million/worker-0", "hundred_million/worker-3",
                                                 "many_types/worker-0", "innocent"}
            jobs = {job["job"]: job for job in report["jobs"]}
            million = jobs["million"]
            assert million["missing_count"] == 999_999 and 0 < len(million["missing"]) <= 20
            assert million["missing"][0] == "worker-1"
            assert jobs["hundred_million"]["missing_count"] == 99_999_999
            assert len(jobs["many_types"]["task_counts"]) <= 64
        elif form == "text":
            assert "999,999 more" in out or "999999" in out.replace(",", "")


def test_a_claimed_cluster_size_leaves_the_runs_listing_small(cluster_logdir):
    client, _ = cp.plugin_client(cluster_logdir)
    started = time.monotonic()
    response = client.get("/data/plugin/leak/runs")
    assert response.status_code == 200
    assert time.monotonic() - started < 30
    body = response.get_data(as_text=True)
    assert len(body) < 200_000, len(body)
    listing = _strict_json(body)
    assert "innocent" in {row["run"] for row in listing["runs"]}
    million = {job["job"]: job for job in listing["jobs"]}["million"]
    assert million["missing_count"] == 999_999 and len(million["missing"]) <= 20


def test_missing_tasks_are_summarized_as_a_count():
    from tb_leak_plugin.analysis import jobs

    row = {"run": "j/worker-0", "verdict": "no_leak", "growth_bytes_per_step": None, "primary_tag": None,
           "top_culprit": None, "task": identity(counts={"chief": 1, "worker": 3})}
    [job] = jobs.group_jobs([row])
    assert job["missing"] == ["chief-0", "worker-1", "worker-2"] and job["missing_count"] == 3
    row["task"] = identity(counts={"worker": 10**12})  # forged beyond what the writer allows: clamped
    [job] = jobs.group_jobs([row])
    assert job["missing_count"] == 2**31 - 2 and len(job["missing"]) == jobs.MAX_MISSING_LISTED
    from tb_leak_plugin.reporting import jobs_text

    text = "\n".join(jobs_text.job_lines(job))
    assert "no run from: worker-1, worker-2" in text and f"and {2**31 - 2 - 20:,} more" in text
    assert len(text) < 2000


# ------------------------------------------------ 13: remote backlog drops


def test_a_series_whose_first_point_was_dropped_stays_readable(monkeypatch):
    """The store hangs until the backlog is full, and a new series starts
    then: its first point (the one carrying its metadata) is dropped. Its
    later points carry the metadata again, so the series is read whole from
    the moment the store is back. Without a server: fsspec's in-memory
    filesystem, through TensorBoard's gfile, refuses puts while "down"."""
    from tb_leak_plugin.eventfile import writer as writer_lib

    monkeypatch.setattr(writer_lib, "MAX_PENDING_BYTES", 4096)
    logdir = f"memory://tbleak/hostile-{os.getpid()}-{time.monotonic_ns()}"
    late = SeriesInfo("objects", "live_count", "count", "mymod.LateLeak")
    writer = EventWriter(logdir + "/run", flush_secs=1e9)
    segments = writer.record_writer
    put = segments._fs.write

    def refuse(*args, **kwargs):
        raise OSError("store hangs")

    for step in range(300):
        if step == 10:
            segments._fs.write = refuse
        if step == 200:
            segments._fs.write = put
            writer.flush()
        sample = [(RSS, 1e6 + step)]
        if step >= 150:
            sample.append((late, 10.0 + step))
        if step == 150:
            assert segments.dropped_records > 0, "the backlog is full when the new series starts"
            dropped = segments.dropped_records
        writer.write(step, sample, wall_time=1.7e9 + step)
        if step == 150:
            assert segments.dropped_records > dropped, "its first point was dropped"
        if step < 10 or step > 200:
            writer.flush()
    writer.close()
    data = reader.load_logdir(logdir)
    (run,) = data.runs
    assert late.tag in run.series, (sorted(run.series), run.warnings)
    steps = run.series[late.tag].steps.tolist()
    assert steps[-100:] == list(range(200, 300)), steps
    assert run.series[RSS.tag].steps.tolist()[-100:] == list(range(200, 300))


def test_event_writer_resends_metadata_after_any_dropped_record():
    """The unit behind it: a record writer that drops (a full backlog) makes
    the next point of each series of the dropped record carry metadata."""
    from tensorboard.compat.proto import event_pb2

    class Dropping:
        generation = 1

        def __init__(self):
            self.dropped_records = 0
            self.kept = []
            self.full = False

        def add_event(self, event):
            if self.full:
                self.dropped_records += 1
                return
            self.kept.append(event_pb2.Event.FromString(event.SerializeToString()))

    writer = EventWriter.__new__(EventWriter)
    writer.logdir, writer._writer, writer._generation, writer._prefixes = "x", Dropping(), 1, {}
    writer.write(0, [(RSS, 1.0)])
    writer._writer.full = True
    writer.write(1, [(RSS, 2.0), (TRACKED, 5.0)])  # TRACKED's metadata is lost with it
    writer._writer.full = False
    writer.write(2, [(RSS, 3.0), (TRACKED, 6.0)])
    writer.write(3, [(RSS, 4.0), (TRACKED, 7.0)])
    with_metadata = [[v.tag for v in e.summary.value if v.HasField("metadata")] for e in writer._writer.kept]
    assert with_metadata == [[RSS.tag], [TRACKED.tag], []]


# ------------------------------------------------ 15: bidirectional controls


def bidi_job() -> dict:
    from tb_leak_plugin.analysis import jobs

    kind = "worker" + BIDI
    counts = {kind: 3}
    rows = [{"run": f"exp/w{i}\u202e", "verdict": "leak" if i else "no_leak", "growth_bytes_per_step": 5.0 * i,
             "primary_tag": "leak/process/rss_bytes",
             "top_culprit": {"kind": "object_type", "name": "evil\u202emod.Type"},
             "task": identity(kind, i, counts) | {"host": "host\u2067x"}} for i in range(2)]
    [job] = jobs.group_jobs(rows)
    return job


def test_cli_shows_bidi_controls_in_job_blocks_as_escapes():
    job = bidi_job()
    assert BIDI_RE.search(job["summary"])  # the data keeps them exactly (JSON escapes them itself)
    report = {"logdir": "/l", "warnings": [], "runs": [], "jobs": [job], "groups": []}
    for text in (cli.format_text(report), cli.format_markdown(report)):
        assert not BIDI_RE.search(text), text
        assert "\\u202e" in text and "\\u2069" in text and "\\u200f" in text


ORIGIN = "http://tbleak.test"


def _serve_frontend(route):
    """The Leak tab's own modules from the frontend folder, on a blank page."""
    name = route.request.url[len(ORIGIN) + 1:].split("?")[0]
    if name == "index.html":
        return route.fulfill(status=200, content_type="text/html",
                             body="<!doctype html><meta charset='utf-8'><body></body>")
    path = os.path.join(FRONTEND, os.path.basename(name))
    if not name.endswith(".js") or not os.path.isfile(path):
        return route.fulfill(status=404, body="")
    with open(path, encoding="utf-8") as handle:
        return route.fulfill(status=200, content_type="text/javascript", body=handle.read())


def test_frontend_shows_bidi_controls_as_escapes(chromium):
    """The Leak tab's own modules (views.js, jobs.js, chart.js) in headless
    Chromium, served from the frontend folder: a job whose task types, runs,
    hosts and culprit hold bidirectional controls renders them as visible
    ``\\u202e`` escapes, in text, tooltips and chart labels."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    job = bidi_job()
    origin = ORIGIN
    serve = _serve_frontend

    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=cp.CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            errors = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.route(f"{origin}/**", serve)
            page.goto(f"{origin}/index.html")
            shown = page.evaluate("""async (job) => {
                const format = await import("./format.js");
                const views = await import("./views.js");
                const jobs = await import("./jobs.js");
                const chart = await import("./chart.js");
                const list = jobs.jobList([job], { selected: job.job, onSelect: () => {} });
                const built = jobs.jobPage(job, { x: "step", onSelectRun: () => {} });
                const series = job.tasks.map((t, i) => ({ label: t.task, color: views.colorFor(i), verdict: t.verdict,
                                                         x: [0, 1, 2], y: [1, 2, 3] }));
                const host = document.createElement("div");
                document.body.append(list, ...built.nodes, host);
                chart.mountTimeline(host, { title: `job ${job.job}: ${job.tasks[1].task}`, tag: "t", unit: "bytes",
                                            xMode: "step", band: false, series, height: 200 });
                host.appendChild(views.legend(series));
                const titles = [...document.querySelectorAll("[title]")].map((n) => n.getAttribute("title"));
                const svgText = [...document.querySelectorAll("svg text, svg title")].map((n) => n.textContent);
                return { text: document.body.innerText, content: document.body.textContent, titles, svgText,
                         inert: format.inert && format.inert("a\\u202eb\\u2066c"),
                         twice: format.inert && format.inert(format.inert("\\u202e")) };
            }""", job)
        finally:
            browser.close()
    assert not errors, errors
    for name in ("text", "content"):
        assert not BIDI_RE.search(shown[name]), shown[name]
    assert shown["inert"] == "a\\u202eb\\u2066c" and shown["twice"] == "\\u202e"
    assert "worker\\u202a\\u202b\\u202c\\u202d\\u202e\\u2066\\u2067\\u2068\\u2069\\u200e\\u200f-1" in shown["text"]
    assert "evil\\u202emod.Type" in shown["text"] and "host\\u2067x" in shown["text"]
    assert shown["titles"] and not any(BIDI_RE.search(title) for title in shown["titles"]), shown["titles"]
    assert any("\\u202e" in text for text in shown["svgText"]), shown["svgText"]
    assert not any(BIDI_RE.search(text) for text in shown["svgText"]), shown["svgText"]


def test_json_output_is_strict_whatever_the_report_holds():
    report = {"runs": [{"growth": float("nan"), "ci": (float("inf"), -float("inf"), 1.5), "n": 3, "ok": True}]}
    assert json.dumps(cli.json_safe(report), allow_nan=False) == \
        '{"runs": [{"growth": null, "ci": [null, null, 1.5], "n": 3, "ok": true}]}'


def test_a_chart_of_a_range_lost_in_rounding_draws(chromium):
    """A flat series whose values (or fitted trend) differ from each other in
    the last bits only: the axis has ticks and the page never hangs or
    throws (a tick loop that cannot step across the range would)."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    origin = ORIGIN
    serve = _serve_frontend

    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=cp.CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            errors = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.route(f"{origin}/**", serve)
            page.goto(f"{origin}/index.html")
            labels = page.evaluate("""async () => {
                const chart = await import("./chart.js");
                const out = [];
                for (const [y, unit] of [[[94791984, 94791984.00000001, 94791984], "bytes"],
                                          [[15681, 15681.000000000002, 15681], "count"],
                                          [[1e300, 1e300, 1e300], "count"]]) {
                  const host = document.createElement("div");
                  document.body.append(host);
                  chart.mountTimeline(host, { title: "t", tag: "t", unit, xMode: "step", band: false, height: 200,
                    series: [{ label: "r", color: "#000", verdict: "no_leak", x: [0, 1, 2], y,
                               trend: { x: [0, 2], y: [y[0], y[1]] } }] });
                  out.push([...host.querySelectorAll("svg .axis text")].map((n) => n.textContent));
                }
                return out;
            }""")
        finally:
            browser.close()
    assert not errors, errors
    assert all(len(axis) >= 2 for axis in labels), labels


def test_rounding_residue_of_a_flat_fit_reads_as_zero_in_the_tab(chromium):
    """A line fitted to an exactly flat series has a slope and bounds of
    float residue (-3.01e-19/step); the tab shows 0, as the CLI's rounding
    does, while real small rates keep their digits."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=cp.CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.route(f"{ORIGIN}/**", _serve_frontend)
            page.goto(f"{ORIGIN}/index.html")
            shown = page.evaluate("""async () => {
                const f = await import("./format.js");
                return [f.formatRate(-3.01e-19, "count"), f.formatRate(8.1e-17, "traces"),
                        f.formatRate(-2.6e-9 * 1e-3, "bytes"), f.formatRate(6.78e-5, "count"),
                        f.formatRate(-0.0041, "count"), f.formatRate(262144, "bytes")];
            }""")
        finally:
            browser.close()
    assert shown == ["+0/step", "+0 traces/step", "+0 B/step", "+0.0000678/step", "−0.0041/step",
                     "+256.0 KiB/step"], shown
