"""Long jobs: the monitor's output grows slowly, and TensorBoard keeps a bounded sample.

* The schedule runs on a simulated clock (``capture/clock.py``): minutes and
  days of training pass in seconds of test, the monitor's own work costing
  nothing or a fixed simulated cost, so the counts are deterministic.
* ``LeakPluginLoader.fix_flags`` gives ``leak`` a bounded default in
  ``--samples_per_plugin``; a user's value wins.
* On a run longer than that bound the tab's report (through TensorBoard's
  Python data provider, on its reservoir sample) and the CLI's (every point)
  give the same verdicts.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

import numpy as np
import pytest

from tb_leak_plugin import Monitor
from tb_leak_plugin.capture import clock, probes as probes_lib
from tb_leak_plugin.capture.monitor import DEFAULT_ALLOWANCE_S
from tb_leak_plugin.eventfile import reader
from tb_leak_plugin.metadata import SeriesInfo
from tb_leak_plugin.plugin import leak_plugin as plugin_lib
from tb_leak_plugin.reporting import cli
from tb_leak_plugin.summary import EventWriter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest_plugin as cp  # noqa: E402

CHEAP_PROBES = ("process", "python", "malloc", "gc")
RSS_TAG = "leak/process/rss_bytes"


def _simulate(logdir: str, seconds: float, step_s: float, sim=None, **monitor_kwargs) -> Monitor:
    sim = sim or clock.SimulatedClock()
    with clock.use(sim):
        monitor = Monitor(logdir, trace_leaks=False, **monitor_kwargs)
        for step in range(int(round(seconds / step_s))):
            sim.advance(step_s)
            monitor.sample(step)
        monitor.close()
    return monitor


def _points(logdir: str, tag: str = RSS_TAG):
    series = reader.load_run("run", logdir).series[tag]
    return np.asarray(series.steps), np.asarray(series.wall_times)


def test_the_simulated_clock_drives_the_schedule_and_the_wall_times(tmp_path):
    sim = clock.SimulatedClock(start_wall=1.0e9)
    monitor = _simulate(str(tmp_path), 60.0, 0.01, sim=sim, probes=CHEAP_PROBES)
    assert clock.current().__class__ is clock.SystemClock  # restored after the block
    assert 59.9 < monitor.stats()["train_seconds"] < 65.0
    steps, walls = _points(str(tmp_path))
    assert walls[0] >= 1.0e9 and walls[-1] - walls[0] > 59.0  # a minute of simulated training
    assert steps[-1] == 5999  # close() took the last step


@pytest.mark.parametrize("probe_cost_s", [0.0, 0.006], ids=["free", "6ms"])
def test_cheap_points_grow_with_the_square_root_of_the_run(tmp_path, probe_cost_s):
    """The same light loop (10 ms steps) for 2 and for 10 minutes: the memory
    series get at most 2.5x the points (a linear schedule would give 5x),
    spread over the whole run, with the recent past still dense. The real
    cheap probes on a clock where they cost nothing (the schedule's spacing
    alone decides), and a probe that costs 6 ms a sample (alone, it gets the
    whole budget: about 1.6 samples a second, the rate measured on a light
    TensorFlow loop before, so the budget limits the first minutes);
    deterministic either way."""
    counts = {}
    for minutes in (2, 10):
        sim = clock.SimulatedClock(real_costs=False)
        probes = list(CHEAP_PROBES)
        if probe_cost_s:
            class Dear(probes_lib.Probe):
                name = "dear"

                def sample(self, objects=None):
                    sim.advance(probe_cost_s)
                    return [(SeriesInfo("process", "rss_bytes", "bytes"), 1e8)]

            probes = [Dear()]
        logdir = str(tmp_path / f"m{minutes}")
        _simulate(logdir, minutes * 60.0, 0.01, sim=sim, probes=probes)
        steps, walls = _points(logdir)
        counts[minutes] = len(steps)
        elapsed = walls - walls[0]
        # The whole run is covered: every tenth has at least 8 points, and no
        # gap is longer than 2% of the run.
        tenths = np.histogram(elapsed, bins=10, range=(0, elapsed[-1]))[0]
        assert tenths.min() >= 8, tenths
        assert np.diff(elapsed).max() <= 0.02 * elapsed[-1]
    assert counts[2] >= 100 and counts[10] >= 250, counts  # enough for live verdicts
    assert counts[10] <= 2.5 * counts[2], counts


def test_a_three_day_run_writes_under_50_mb(tmp_path, monkeypatch):
    """Three days of 1-second steps at default settings, every probe group
    present: cheap counters (12 series, 1 ms a sample) and heap walks (100
    type and tensor series, 0.2 s a walk, as on a TensorFlow heap), their
    costs simulated so the run is deterministic and takes seconds."""
    sim = clock.SimulatedClock(real_costs=False)

    class Cheap(probes_lib.Probe):
        name = "cheap"
        infos = [SeriesInfo("process", f"m{k}_bytes", "bytes") for k in range(12)]

        def sample(self, objects=None):
            sim.advance(0.001)
            return [(info, 1e8 + k) for k, info in enumerate(self.infos)]

    class Heap(probes_lib.Probe):
        name = "heap"
        needs_objects = True
        infos = [SeriesInfo("objects", "live_count", "count", f"pkg.Type{k}") for k in range(100)]

        def sample(self, objects=None):
            sim.advance(0.2)
            return [(info, 1000.0 + k) for k, info in enumerate(self.infos)]

    monkeypatch.setattr(probes_lib, "collect_objects", lambda read_locals=False: probes_lib.Census([]))
    logdir = str(tmp_path)
    monitor = _simulate(logdir, 3 * 86400.0, 1.0, sim=sim, probes=[Cheap(), Heap()],
                        census_collects_garbage=False)
    size = sum(os.path.getsize(os.path.join(logdir, name)) for name in os.listdir(logdir))
    run = reader.load_run("run", logdir)
    cheap = len(run.series["leak/process/m0_bytes"].steps)
    walks = len(run.series["leak/objects/pkg.Type0"].steps)
    assert size < 50e6, size
    assert 5_000 <= cheap <= 10_000, cheap  # ~16*sqrt(259,200 s)
    assert walks <= 3_000, walks
    assert monitor.overhead <= 0.011
    # The last hour still has points every couple of minutes at most.
    walls = np.asarray(run.series["leak/process/m0_bytes"].wall_times)
    recent = walls[walls >= walls[-1] - 3600]
    assert len(recent) >= 30 and np.diff(recent).max() <= 120


def test_fix_flags_bounds_the_points_tensorboard_keeps():
    from tensorboard import program
    from tensorboard.plugins.core import core_plugin

    def configure(*args, logdir=("--logdir", "/nonexistent")):
        board = program.TensorBoard(plugins=[core_plugin.CorePluginLoader, plugin_lib.LeakPluginLoader])
        board.configure(argv=["tensorboard", *logdir, *args])
        return board.flags.samples_per_plugin

    # A local logdir: the tab reads its files, TensorBoard keeps one point a series.
    assert plugin_lib.LOCAL_SAMPLES_PER_TAG == 1
    assert configure() == {"leak": plugin_lib.LOCAL_SAMPLES_PER_TAG}
    assert configure("--samples_per_plugin=leak=0") == {"leak": 0}  # the user's "all" wins
    assert configure("--samples_per_plugin=leak=50,images=3") == {"leak": 50, "images": 3}
    assert configure("--samples_per_plugin=images=3") == {"images": 3, "leak": plugin_lib.LOCAL_SAMPLES_PER_TAG}
    # Where the tab reads TensorBoard's copy: a bounded, even sample.
    assert 0 < plugin_lib.DEFAULT_SAMPLES_PER_TAG <= 20_000
    assert configure(logdir=("--logdir", "s3://bucket/runs")) == {"leak": plugin_lib.DEFAULT_SAMPLES_PER_TAG}
    assert configure(logdir=("--logdir_spec", "a:/nonexistent")) == {"leak": plugin_lib.DEFAULT_SAMPLES_PER_TAG}


LONG_POINTS = 15_000
SERIES = [SeriesInfo("process", "rss_anon_bytes", "bytes"), SeriesInfo("process", "malloc_bytes", "bytes"),
          SeriesInfo("python", "allocated_blocks", "blocks"), SeriesInfo("gc", "tracked_objects", "count")]


def _write_long_run(run_dir: str, leak_per_step: float, seed: int) -> None:
    """A run as the old monitor wrote it: a point of every series each step,
    with slow autocorrelated noise (an AR(1) walk) and ``leak_per_step``
    bytes kept per step in the memory series."""
    rng = np.random.default_rng(seed)
    noise = rng.normal(0, 1, size=(LONG_POINTS, len(SERIES)))
    walk = np.empty_like(noise)
    walk[0] = noise[0]
    for i in range(1, LONG_POINTS):  # AR(1), phi = 0.99
        walk[i] = 0.99 * walk[i - 1] + noise[i]
    steps = np.arange(LONG_POINTS)
    values = np.array([600e6, 500e6, 2e6, 1.2e6]) + walk * np.array([2e5, 1e5, 100, 10])
    values[:, :2] += leak_per_step * steps[:, None]
    writer = EventWriter(run_dir, flush_secs=1e9)
    for i in range(LONG_POINTS):
        writer.write(int(steps[i]), list(zip(SERIES, values[i].tolist())), wall_time=1.7e9 + 0.5 * i)
        if i % 2000 == 1999:
            writer.flush()
    writer.close()


@pytest.fixture(scope="module")
def long_logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("long")
    _write_long_run(str(root / "leaky"), leak_per_step=5000.0, seed=1)
    _write_long_run(str(root / "clean"), leak_per_step=0.0, seed=2)
    return str(root)


def _cli_runs(logdir: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(["analyze", logdir, "--format", "json"])
    return {run["run"]: run for run in json.loads(out.getvalue())["runs"]}


def _tab_reports(logdir: str, runs, **plugin_kwargs) -> dict:
    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    provider = cp.multiplexer_provider(logdir, samples=plugin_lib.DEFAULT_SAMPLES_PER_TAG)
    plugin = plugin_lib.LeakPlugin(base_plugin.TBContext(logdir=logdir, data_provider=provider),
                                   revalidate_secs=0, **plugin_kwargs)
    client = Client(application.TensorBoardWSGI([plugin], data_provider=provider))
    reports = {}
    for name in runs:
        response = client.get("/data/plugin/leak/report", query_string={"run": name})
        assert response.status_code == 200, response.get_data(as_text=True)
        reports[name] = json.loads(response.get_data(as_text=True))
    return reports


def test_the_tab_reads_a_local_logdir_as_the_cli_does(long_logdir):
    """A local logdir is read from its files: every point, whatever TensorBoard keeps."""
    cli_runs = _cli_runs(long_logdir)
    assert cli_runs["leaky"]["verdict"] == "leak" and cli_runs["clean"]["verdict"] != "leak"
    tabs = _tab_reports(long_logdir, cli_runs)
    for name, cli_run in cli_runs.items():
        tab_series = {s["tag"]: s for s in tabs[name]["series"]}
        for series in cli_run["series"]:
            assert series["samples"] == LONG_POINTS
            assert tab_series[series["tag"]] == series  # the same analysis of the same points
        assert tabs[name]["verdict"] == cli_run["verdict"], name


def test_through_the_provider_the_tab_agrees_on_a_run_longer_than_tensorboard_keeps(long_logdir):
    """A remote logdir is read through TensorBoard's sample of each series."""
    cli_runs = _cli_runs(long_logdir)
    tabs = _tab_reports(long_logdir, cli_runs, read_files=False)
    for name, cli_run in cli_runs.items():
        tab_series = {s["tag"]: s for s in tabs[name]["series"]}
        for series in cli_run["series"]:
            thinned = tab_series[series["tag"]]
            assert thinned["samples"] == plugin_lib.DEFAULT_SAMPLES_PER_TAG
            assert thinned["last_step"] == LONG_POINTS - 1  # the reservoir keeps the latest point
            assert thinned["verdict"] == series["verdict"], (name, series["tag"])
        assert tabs[name]["verdict"] == cli_run["verdict"], name


def test_a_series_past_the_readers_bound_is_thinned_evenly_and_keeps_its_verdict(long_logdir, monkeypatch):
    """Memory stays bounded on a huge series: past 2 x MAX_POINTS_PER_SERIES
    every stride-th point is kept (evenly, the newest always), the verdict
    is the full series', and a warning says so."""
    full = {name: reader.load_run(name, os.path.join(long_logdir, name)) for name in ("leaky", "clean")}
    cli_full = _cli_runs(long_logdir)
    monkeypatch.setattr(reader, "MAX_POINTS_PER_SERIES", 1024)
    for name in ("leaky", "clean"):
        run = reader.load_run(name, os.path.join(long_logdir, name))
        for tag, series in run.series.items():
            assert 1024 <= series.steps.size <= 2 * 1024 + 2
            assert series.steps[-1] == LONG_POINTS - 1 and series.steps[0] == 0
            assert np.isin(series.steps, full[name].series[tag].steps).all()
            gaps = np.diff(series.steps)
            assert gaps.max() == gaps.min() or gaps[:-1].max() == gaps[:-1].min()  # even, but for the newest
        assert any("1 in every 8 analysed (1,876 points)" in w for w in run.warnings), run.warnings
    cli_thinned = _cli_runs(long_logdir)
    for name, run in cli_full.items():
        assert cli_thinned[name]["verdict"] == run["verdict"]
        assert {s["tag"]: s["verdict"] for s in cli_thinned[name]["series"]} == \
            {s["tag"]: s["verdict"] for s in run["series"]}


def test_thinning_keeps_each_files_first_point_so_a_restart_reads_the_same(tmp_path, monkeypatch):
    """A job restarted from a checkpoint: the dead attempt's steps past it are
    dropped from a thinned series exactly as from the full one."""
    run_dir = str(tmp_path / "job")
    info = SERIES[0]
    for attempt, (first, last) in enumerate([(0, 3000), (1777, 5000)]):
        writer = EventWriter(run_dir, flush_secs=1e9, name_tag=f"a{attempt}")
        for step in range(first, last):
            writer.write(step, [(info, 1e6 + step)], wall_time=1.7e9 + attempt * 1e4 + step)
        writer.close()
    full = reader.load_run("job", run_dir).series[info.tag]
    monkeypatch.setattr(reader, "MAX_POINTS_PER_SERIES", 256)
    thinned = reader.load_run("job", run_dir).series[info.tag]
    assert full.steps.size == 5000 and thinned.steps.size < 600
    assert np.isin(thinned.steps, full.steps).all()
    assert 1777 in thinned.steps.tolist() and thinned.steps[-1] == 4999
    np.testing.assert_array_equal(thinned.values, 1e6 + thinned.steps)


def _simulated_probes(sim, walk_s: float, malloc_s: float | None = None) -> list:
    """A cheap counter costing 1 ms a point, heap walks costing ``walk_s``
    and (if given) the C allocator's counter costing ``malloc_s``, each
    advancing ``sim`` by its cost."""

    def probe(name, info, cost, needs_objects=False):
        class Simulated(probes_lib.Probe):
            def sample(self, objects=None):
                sim.advance(cost)
                return [(info, 1e8)]

        Simulated.name, Simulated.needs_objects = name, needs_objects
        return Simulated()

    probes = [probe("process", SeriesInfo("process", "rss_anon_bytes", "bytes"), 0.001),
              probe("heap", SeriesInfo("objects", "live_count", "count", "pkg.Record"), walk_s, True)]
    if malloc_s is not None:
        probes.append(probe("malloc", SeriesInfo("process", "malloc_bytes", "bytes"), malloc_s))
    return probes


def _schedule(tmp_path, monkeypatch, seconds: float, walk_s: float = 0.25, malloc_s: float | None = None) -> dict:
    """Steps, in training seconds (10 ms steps), of each series of a run of
    ``seconds`` at defaults: a cheap counter costing 1 ms a point, the C
    allocator's ``malloc_s`` (if given) and heap walks ``walk_s`` each, as on
    a TensorFlow heap; the costs simulated, so the schedule is deterministic."""
    sim = clock.SimulatedClock(real_costs=False)
    probes = _simulated_probes(sim, walk_s, malloc_s)
    monkeypatch.setattr(probes_lib, "collect_objects", lambda read_locals=False: probes_lib.Census([]))
    logdir = str(tmp_path / f"run{seconds:g}_{walk_s:g}_{malloc_s}")
    _simulate(logdir, seconds, 0.01, sim=sim, probes=probes, census_collects_garbage=False)
    return {tag: np.asarray(series.steps) * 0.01 for tag, series in reader.load_run("run", logdir).series.items()}


def _walk_times(tmp_path, monkeypatch, seconds: float, walk_s: float = 0.25) -> tuple:
    """Training seconds of a run's heap walks (see ``_schedule``), and its end."""
    walks = _schedule(tmp_path, monkeypatch, seconds, walk_s)["leak/objects/pkg.Record"]
    return walks, walks[-1]


@pytest.mark.parametrize("seconds", [10.0, 20.0, 40.0])
def test_a_short_runs_heap_walks_spread_over_it(tmp_path, monkeypatch, seconds):
    # The allowance pays for about five walks of a TensorFlow heap. Spent in
    # the first half second of the loop, all of them fell in its first two
    # seconds and a 10-40 s run was seen again only at close(): the current
    # segment the analysis judges held one walk. Released over seconds, a
    # walk falls in the run's second quarter or later, before close().
    walks, end = _walk_times(tmp_path, monkeypatch, seconds)
    before_close = walks[:-1]
    assert len(walks) >= 5, walks
    assert before_close.max() >= 0.25 * end, walks
    assert np.sum(before_close < 2.0) <= 3, walks


def test_a_three_second_repro_gets_four_heap_walks(tmp_path, monkeypatch):
    # Four points judge a type's count: the half of the allowance released
    # in the first second pays for them.
    walks, _end = _walk_times(tmp_path, monkeypatch, 3.0)
    assert len(walks) >= 4, walks


def _cheap_points(tmp_path, monkeypatch, seconds: float, malloc_s: float) -> tuple:
    """Training seconds of a cheap counter's points and of the C allocator's
    (see ``_schedule``)."""
    series = _schedule(tmp_path, monkeypatch, seconds, malloc_s=malloc_s)
    return series["leak/process/rss_anon_bytes"], series["leak/process/malloc_bytes"]


@pytest.mark.parametrize("seconds", [10.0, 30.0])
def test_a_short_runs_last_third_holds_enough_cheap_points(tmp_path, monkeypatch, seconds):
    # The analysis reads the current trend on the last third of the run's
    # steps. With the cheap counters' allowance all released in the first
    # half second, ~200 points fell in the first seconds and a 10-30 s run
    # kept 12-17 in its last third, too few for an interval whose degrees of
    # freedom the noise's autocorrelation divides.
    rss, _malloc = _cheap_points(tmp_path, monkeypatch, seconds, malloc_s=0.0001)
    end = rss[-1]
    assert np.sum(rss >= 2.0 * end / 3.0) >= 20, rss
    assert rss.size >= 150, rss.size  # still dense early: a 2-s repro is judged on them


def test_a_costly_allocator_counter_does_not_thin_the_other_counters(tmp_path, monkeypatch):
    # glibc's mallinfo2 walks every arena's free lists: 5-6 ms a point in a
    # process where XLA compiled a kernel per shape, against ~1 ms for the
    # other counters together. Sampled with them, it cut every memory
    # series to a fifth of its points (a 27-s leak's last 70% held 7).
    rss, malloc = _cheap_points(tmp_path, monkeypatch, 30.0, malloc_s=0.006)
    cheap_rss, _ = _cheap_points(tmp_path, monkeypatch, 30.0, malloc_s=0.0001)
    assert rss.size >= 0.8 * cheap_rss.size, (rss.size, cheap_rss.size)
    assert malloc.size >= 12, malloc  # the allocator keeps points of its own


@pytest.mark.parametrize("steps", [500, 1000, 3000])
@pytest.mark.parametrize("overdraft_s", [0.0, 0.8, 1.6])
def test_the_watchs_overdraft_is_repaid_within_the_run_budget(tmp_path, monkeypatch, overdraft_s, steps):
    # The leak watch may run past what the budget has released (a first trace,
    # an early analysis: the answer the user needs, while the loop's frames
    # are alive). That time is an advance on the allowance not yet released:
    # the heap walks repay it later, so that a 30-s run as a whole costs at
    # most 1% of its training plus the allowance (it cost the overdraft more:
    # 2.70 s where 2.30 s were allowed), and it never advances more than the
    # allowance not released yet. Simulated costs: deterministic; the
    # overdraft is booked as the monitor books it after a walk.
    sim = clock.SimulatedClock(real_costs=False)
    probes = _simulated_probes(sim, 0.25)
    monkeypatch.setattr(probes_lib, "collect_objects", lambda read_locals=False: probes_lib.Census([]))
    with clock.use(sim):
        monitor = Monitor(str(tmp_path), trace_leaks=False, probes=probes, census_collects_garbage=False)
        booked = False
        for step in range(steps):
            sim.advance(0.01)
            monitor.sample(step)
            heap = next(u for u in monitor._units if u.needs_objects)
            if not booked and heap.runs >= 2:
                # As after_walk spending it past the budget, at most what the
                # monitor lets it advance (the allowance not released yet).
                advance = min(overdraft_s, monitor._advance_s())
                sim.advance(advance)
                monitor._monitor_s += advance
                monitor._overdraft_s += advance
                booked = True
                # ... before sample() schedules the next runs, as it does after the watch.
                for unit in monitor._units:
                    unit.schedule(monitor.overhead_budget, monitor._allowance_s(), monitor._final_walk_s()
                                  if unit.needs_objects else None, monitor._next_walk_s() if unit.needs_objects
                                  else None, monitor._loop_start_s, monitor._unit_cap_s(unit))
        monitor.close()
    stats = monitor.stats()
    assert booked and stats["overdraft_seconds"] == advance
    # Room for a first trace at least (0.38 s), the final walk's kept.
    assert advance >= min(overdraft_s, 0.38), advance
    allowed = 0.01 * stats["train_seconds"] + DEFAULT_ALLOWANCE_S
    assert stats["monitor_seconds"] <= allowed + 0.02, (stats, allowed)
    assert stats["units"]["heap"]["runs"] >= 3  # still walked after the advance, and at close
    # The heap walks repay it: the cheap counters keep their points (a short
    # run's memory series are judged on them).
    free = _schedule(tmp_path / "free", monkeypatch, steps * 0.01)["leak/process/rss_anon_bytes"]
    assert stats["units"]["cheap"]["runs"] >= 0.95 * free.size, (stats["units"]["cheap"]["runs"], free.size)
