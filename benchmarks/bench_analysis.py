"""End-to-end analysis speed: a big logdir read and judged, like `tb-leak analyze`.

    python benchmarks/bench_analysis.py [--runs 100] [--series 10] [--points 10000] [--logdir DIR]

Writes (once, cached under the temp dir) a logdir of RUNS runs x SERIES
series x POINTS points with tb-leak's own writer (one event per step holding
every series, as the Monitor writes), then times, as medians of 3:
  * reading every point back (TF-free loader), and
  * reading + building every run's report (the CLI's work, traces skipped),
and the verdict for one 1,000,000-point series.
Targets: whole logdir <= 5 s; one 1M-point series <= 100 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tb_leak_plugin.eventfile import reader as loading  # noqa: E402
from tb_leak_plugin.reporting import logdir as analyze  # noqa: E402
from tb_leak_plugin.analysis.trend import assess_series  # noqa: E402
from tb_leak_plugin.metadata import SeriesInfo  # noqa: E402
from tb_leak_plugin.summary import EventWriter  # noqa: E402


def make_logdir(path: str, runs: int, series: int, points: int) -> None:
    rng = np.random.default_rng(0)
    infos = [SeriesInfo("process", "rss_bytes", "bytes"), SeriesInfo("python", "allocated_blocks", "blocks"),
             SeriesInfo("tf", "bytes_in_use", "bytes", "CPU:0")]
    infos += [SeriesInfo("objects", "live_count", "count", f"pkg.Type{k}") for k in range(series - len(infos))]
    infos = infos[:series]
    steps = np.arange(points)
    for run in range(runs):
        leaky = run % 4 == 0
        columns = []
        for k, _info in enumerate(infos):
            level = 1e8 if k < 3 else 1e4
            noise = rng.normal(0, level * 1e-3, points)
            growth = (level * 1e-4) * steps if leaky and k in (0, 3) else 0.0
            columns.append(level + noise + growth)
        writer = EventWriter(os.path.join(path, f"run{run:03d}"), flush_secs=1e9)
        wall = 1.7e9
        for i in range(points):
            writer.write(i, [(info, columns[k][i]) for k, info in enumerate(infos)], wall_time=wall + i)
        writer.close()
    open(os.path.join(path, ".complete"), "w").close()


def timed(function, repeats=3):
    durations = []
    result = None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        durations.append(time.perf_counter() - started)
    return statistics.median(durations), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--series", type=int, default=10)
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--logdir", default=None)
    args = parser.parse_args()
    logdir = args.logdir or os.path.join(
        tempfile.gettempdir(), f"tbleak-bench-logdir-{args.runs}x{args.series}x{args.points}")
    if not os.path.exists(os.path.join(logdir, ".complete")):
        print(f"writing {logdir} ...", flush=True)
        started = time.perf_counter()
        make_logdir(logdir, args.runs, args.series, args.points)
        print(f"  written in {time.perf_counter() - started:.0f} s")
    total_points = args.runs * args.series * args.points
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _s, fs in os.walk(logdir) for f in fs)
    print(f"== logdir: {args.runs} runs x {args.series} series x {args.points:,} points "
          f"= {total_points:,} points, {size / 2**20:.0f} MiB")

    load_s, data = timed(lambda: loading.load_logdir(logdir))
    loaded = sum(len(s) for r in data.runs for s in r.series.values())
    assert loaded == total_points, (loaded, total_points)
    print(f"  read every point (TF-free loader): {load_s:.2f} s ({total_points / load_s / 1e6:.2f} M points/s)")
    analyze_s, report = timed(lambda: analyze.analyze_logdir(logdir, with_traces=False))
    leaks = sum(r.verdict == "leak" for r in report.runs)
    print(f"  read + judge every run (tb-leak analyze): {analyze_s:.2f} s (target <= 5 s) "
          f"{'PASS' if analyze_s <= 5 else 'FAIL'}; {leaks} of {len(report.runs)} runs called leak "
          f"({args.runs // 4 + (args.runs % 4 > 0)} written leaky)")

    rng = np.random.default_rng(1)
    n = 1_000_000
    steps = np.arange(n)
    values = 1e9 + rng.normal(0, 1e6, n) + 5.0 * steps
    assess_series(steps, values)  # warm-up
    series_s, result = timed(lambda: assess_series(steps, values, unit="bytes"), repeats=7)
    print(f"== one 1,000,000-point series: {series_s * 1e3:.0f} ms (target <= 100 ms) "
          f"{'PASS' if series_s <= 0.1 else 'FAIL'}; verdict {result.verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
