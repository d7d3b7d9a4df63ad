"""Long jobs: how much the monitor writes, and what TensorBoard and the CLI pay to read it.

    python benchmarks/bench_long_runs.py [--quick] [--skip-tensorboard] [--only-old-run] [--fleet N] [--keep DIR]
                                         [--tensorboard-python PY]

1. Simulated runs at defaults (every default probe, the 1% budget, real
   probe costs; training simulated by ``capture.clock.SimulatedClock`` in
   steps of 0.5 s): 1 day and 3 days (``--quick``: 1 hour and 6 hours).
   Prints points per series (cheap counters, heap walks), series and event
   file bytes; target: the 3-day run under 50 MB.
2. ``tb-leak analyze`` of a logdir holding those runs: wall time and peak
   memory of the CLI process. Then a logdir of 100 such runs (50 copies of
   each): its size, ``tb-leak analyze`` on it (time, peak memory), and a
   real ``tensorboard`` on it in both ``--load_fast`` modes (peak RSS, seconds
   to the first report of the last run, verdicts equal to the CLI's).
3. A logdir with one run of 10 series x 520,000 points (``--quick``:
   52,000), written with the package's ``EventWriter`` as the monitor wrote
   before its schedule grew with sqrt(T) (one point of every series per
   step, about 3 days at the old rate; ~200 MB). Then a real ``tensorboard``
   (with the Leak plugin and its default ``--samples_per_plugin``) under
   ``--load_fast=false`` and ``--load_fast=true``: peak RSS (with the Rust
   data server), seconds to the first ``/data/plugin/leak/report`` answer
   for the run and to one that covers its last step, and whether that
   report's verdict (and each series' verdict) equals the CLI's. A
   TensorBoard over a tiny logdir gives the baseline RSS and start-up time.
   Targets: under 600 MB and the report within 5 s (both modes); verdicts equal.
   ``--tensorboard-python PY`` runs TensorBoard with another interpreter, e.g.
   an environment with tensorboard and tb-leak but no TensorFlow (TensorBoard
   then uses its own stub instead of importing TensorFlow's ~450 MB).

Prints each figure and PASS/FAIL against its target; exits 1 on a FAIL.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from tb_leak_plugin import Monitor  # noqa: E402
from tb_leak_plugin.capture import clock  # noqa: E402
from tb_leak_plugin.eventfile import reader  # noqa: E402
from tb_leak_plugin.metadata import SeriesInfo  # noqa: E402
from tb_leak_plugin.plugin.leak_plugin import LOCAL_SAMPLES_PER_TAG  # noqa: E402
from tb_leak_plugin.summary import EventWriter  # noqa: E402

SIZE_TARGET_MB = 50.0
TB_RSS_TARGET_MB = 600.0
TB_REPORT_TARGET_S = 5.0
OLD_POINTS = 520_000
STEP_S = 0.5


def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(path, "**", "*"), recursive=True)
               if os.path.isfile(f))


def simulate(run_dir: str, seconds: float, step_s: float = STEP_S) -> dict:
    """A run of ``seconds`` of simulated training at Monitor defaults."""
    started = time.perf_counter()
    with clock.use(clock.SimulatedClock()) as sim:
        monitor = Monitor(run_dir)
        kept = []
        for step in range(int(seconds / step_s)):
            sim.advance(step_s)
            if step % 1000 == 0:
                kept.append(bytearray(64))  # a small leak, so the heap walks have work
            monitor.sample(step)
        monitor.close()
    run = reader.load_run("run", run_dir)
    counts = {tag: len(series.steps) for tag, series in run.series.items()}
    stats = monitor.stats()
    return {
        "seconds": seconds,
        "wall_s": time.perf_counter() - started,
        "bytes": _dir_bytes(run_dir),
        "series": len(counts),
        "cheap_points": counts.get("leak/process/rss_bytes", 0),
        "max_points": max(counts.values()),
        "heap_walks": stats["units"].get("heap", {}).get("runs", 0),
        "overhead": stats["overhead"],
    }


def write_old_run(run_dir: str, points: int, seed: int = 0) -> None:
    """10 series x ``points``, one event per step holding every series (as the
    monitor wrote before), 0.5 s apart; a 200 B/step leak in three memory
    series under slow (AR(1)) noise of a few MB."""
    rng = np.random.default_rng(seed)
    infos = [SeriesInfo("process", "rss_bytes", "bytes"), SeriesInfo("process", "rss_anon_bytes", "bytes"),
             SeriesInfo("process", "malloc_bytes", "bytes"), SeriesInfo("process", "available_bytes", "bytes"),
             SeriesInfo("python", "allocated_blocks", "blocks"), SeriesInfo("tf", "bytes_in_use", "bytes", "CPU:0"),
             SeriesInfo("tf", "peak_bytes", "bytes", "CPU:0"), SeriesInfo("gc", "tracked_objects", "count"),
             SeriesInfo("gc", "collections_gen0", "collections"),
             SeriesInfo("tf_graph", "ops", "ops", "default_graph")]
    steps = np.arange(points) * 3
    noise = rng.normal(0, 1, size=(points, len(infos)))
    walk = np.empty_like(noise)
    walk[0] = noise[0]
    for i in range(1, points):  # AR(1), phi = 0.99
        walk[i] = 0.99 * walk[i - 1] + noise[i]
    walk *= 0.14  # unit sd
    base = np.array([900e6, 600e6, 500e6, 30e9, 2e6, 300e6, 0, 1.2e6, 0, 5000.0])
    sd = np.array([2e6, 2e6, 1e6, 5e7, 1e3, 1e6, 0, 100, 0, 0])
    leak = np.array([200, 200, 200, -200, 0, 200, 0, 0, 0, 0]) / 3.0
    values = base + walk * sd + np.outer(steps, leak)
    values[:, 6] = np.maximum.accumulate(values[:, 5]) + 1e6
    values[:, 8] = steps // 7
    writer = EventWriter(run_dir, flush_secs=1e9)
    for i in range(points):
        writer.write(int(steps[i]), list(zip(infos, values[i].tolist())), wall_time=1.7e9 + i * 0.5)
        if i % 2000 == 1999:
            writer.flush()
    writer.close()


def cli_analyze(logdir: str) -> dict:
    """``tb-leak analyze --format json`` in a child: wall time, peak RSS, report."""
    code = ("import resource, sys, runpy; sys.argv = ['tb-leak', 'analyze', sys.argv[1], '--format', 'json'];"
            "from tb_leak_plugin.reporting import cli\n"
            "try:\n    rc = cli.main(sys.argv[1:])\nfinally:\n"
            "    print('MAXRSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
            "sys.exit(rc)")
    env = dict(os.environ, PYTHONPATH=REPO)
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code, logdir], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    maxrss = [line for line in result.stderr.splitlines() if line.startswith("MAXRSS")]
    peak_mb = int(maxrss[-1].split()[1]) / 1024 if maxrss else float("nan")
    return {"wall_s": wall, "peak_mb": peak_mb, "report": json.loads(result.stdout), "rc": result.returncode}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tree_rss(process) -> int:
    import psutil

    total = 0
    for proc in [process] + process.children(recursive=True):
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


def tensorboard(logdir: str, run: str, load_fast: bool, last_step: int | None, timeout: float = 300.0,
                settle_s: float = 2.0, python: str | None = None) -> dict:
    """A real tensorboard on ``logdir``: peak RSS, seconds to ready, to the first
    report of ``run`` and to one whose series reach ``last_step``. The peak is
    watched for ``settle_s`` more after that report: TensorBoard's own loader
    goes on reading the logdir after the tab has answered (about 80 s for an
    old 200 MB run under ``--load_fast=false``)."""
    import psutil

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    log = tempfile.TemporaryFile()
    board = subprocess.Popen(
        [python or sys.executable, "-m", "tensorboard.main", "--logdir", logdir, "--host", "127.0.0.1", "--port", str(port),
         f"--load_fast={'true' if load_fast else 'false'}", "--reload_interval", "5"],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    process = psutil.Process(board.pid)
    started = time.perf_counter()
    out = {"ready_s": None, "first_s": None, "first_verdict": None, "complete_s": None, "report": None}
    peak = [0]
    watching = threading.Event()

    def watch():  # every 50 ms, also while a request is being answered
        while not watching.wait(0.05):
            peak[0] = max(peak[0], _tree_rss(process))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        while time.perf_counter() - started < timeout:
            if board.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"tensorboard exited: {log.read()[-2000:]!r}")
            try:
                if out["ready_s"] is None:
                    with urllib.request.urlopen(url + "/data/runs", timeout=30) as response:
                        json.loads(response.read())
                    out["ready_s"] = time.perf_counter() - started
                with urllib.request.urlopen(f"{url}/data/plugin/leak/report?run={run}", timeout=120) as response:
                    report = json.loads(response.read())
            except Exception:
                time.sleep(0.2)
                continue
            now = time.perf_counter() - started
            if out["first_s"] is None:
                out["first_s"], out["first_verdict"] = now, report.get("verdict")
            last = max((s.get("last_step") or 0 for s in report.get("series", [])), default=None)
            if last_step is None or last == last_step:
                out["complete_s"], out["report"] = now, report
                break
            time.sleep(0.2)
        out["peak_at_report_mb"] = peak[0] / 2**20
        time.sleep(settle_s)  # TensorBoard's loader, still reading
    finally:
        watching.set()
        watcher.join()
        board.terminate()
        try:
            board.wait(timeout=10)
        except subprocess.TimeoutExpired:
            board.kill()
            board.wait()
    out["peak_mb"] = peak[0] / 2**20
    return out


def fleet_report(root: str, new_logdir: str, names: list, args, check) -> None:
    """A logdir of ``args.fleet`` runs, copies of the simulated ones in turn:
    size, ``tb-leak analyze`` and TensorBoard (both modes) on it."""
    fleet = os.path.join(root, f"fleet-{args.fleet}")
    if not os.path.isdir(fleet):
        for i in range(args.fleet):
            source = names[i * len(names) // args.fleet]
            shutil.copytree(os.path.join(new_logdir, source), os.path.join(fleet + ".partial", f"{source}_{i:03d}"))
        os.replace(fleet + ".partial", fleet)
    size = _dir_bytes(fleet)
    result = cli_analyze(fleet)
    runs = result["report"]["runs"]
    counts = {}
    for run in runs:
        counts[run["verdict"]] = counts.get(run["verdict"], 0) + 1
    print(f"  a logdir of {len(runs)} such runs ({size / 1e6:.0f} MB): tb-leak analyze {result['wall_s']:.1f} s, "
          f"peak {result['peak_mb']:.0f} MB, verdicts {counts}")
    check(f"{len(runs)} runs listed by tb-leak analyze", len(runs) == args.fleet)
    if args.skip_tensorboard:
        return
    last = sorted(runs, key=lambda run: run["run"])[-1]
    last_step = max(s["last_step"] for s in last["series"])
    for load_fast in (False, True):
        row = tensorboard(fleet, last["run"], load_fast, last_step, settle_s=20.0 if args.quick else 60.0,
                          python=args.tensorboard_python)
        mode = f"--load_fast={'true' if load_fast else 'false'}"
        ready = row["ready_s"] or float("nan")
        complete = row["complete_s"]
        print(f"   {mode} on {len(runs)} runs: peak RSS {row['peak_mb']:.0f} MB "
              f"({row['peak_at_report_mb']:.0f} MB up to the report), ready {ready:.1f} s, report of "
              f"{last['run']} {(complete - ready) if complete is not None else float('nan'):.1f} s after ready, "
              f"verdict {row['report'].get('verdict') if row['report'] else None} (CLI: {last['verdict']})")
        check(f"{mode} on {len(runs)} runs: report within {TB_REPORT_TARGET_S:.0f} s of ready",
              complete is not None and complete - ready <= TB_REPORT_TARGET_S)
        check(f"{mode} on {len(runs)} runs: the tab's verdicts equal the CLI's",
              row["report"] is not None and _verdicts(row["report"]) == _verdicts(last))


def _verdicts(report: dict) -> tuple:
    return report.get("verdict"), {s["tag"]: s.get("verdict") for s in report.get("series", [])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1 h / 6 h runs, 52,000 old points")
    parser.add_argument("--skip-tensorboard", action="store_true")
    parser.add_argument("--fleet", type=int, default=100, help="runs in the many-run logdir (0: skip it)")
    parser.add_argument("--only-old-run", action="store_true", help="skip the simulated runs (1. and 2.)")
    parser.add_argument("--tensorboard-python", default=None,
                        help="run tensorboard with this interpreter (an environment with tensorboard and tb-leak "
                             "installed, e.g. one without TensorFlow, where TensorBoard uses its own stub)")
    parser.add_argument("--keep", help="write the logdirs here (kept) instead of a temporary directory")
    args = parser.parse_args(argv)
    root = args.keep or tempfile.mkdtemp(prefix="bench-long-")
    os.makedirs(root, exist_ok=True)
    failures = []

    def check(name, ok):
        print(f"  {name}: {'PASS' if ok else 'FAIL'}")
        if not ok:
            failures.append(name)

    try:
        runs = [("1h", 3600.0), ("6h", 6 * 3600.0)] if args.quick else [("1d", 86400.0), ("3d", 3 * 86400.0)]
        if args.only_old_run:
            runs = []
        if runs:
            print(f"1. simulated runs at Monitor defaults (steps of {STEP_S} s, real probe costs)")
            new_logdir = os.path.join(root, "new")
            sims = {}
            for name, seconds in runs:
                sims[name] = row = simulate(os.path.join(new_logdir, name), seconds)
                print(f"  {name}: {row['cheap_points']:,} points per cheap series (most in any series "
                      f"{row['max_points']:,}), {row['heap_walks']} heap walks, {row['series']} series, "
                      f"{row['bytes'] / 1e6:.2f} MB, overhead {row['overhead']:.2%} "
                      f"(simulated in {row['wall_s']:.0f} s)")
            (longest_name, longest_s) = runs[-1]
            limit = SIZE_TARGET_MB * longest_s / (3 * 86400.0)
            check(f"{longest_name} run under {limit:.1f} MB", sims[longest_name]["bytes"] / 1e6 < limit)

            print("2. tb-leak analyze on those runs")
            result = cli_analyze(new_logdir)
            verdicts = {run["run"]: run["verdict"] for run in result["report"]["runs"]}
            print(f"  {result['wall_s']:.2f} s, peak {result['peak_mb']:.0f} MB, verdicts {verdicts}")
            if args.fleet:
                fleet_report(root, new_logdir, [name for name, _ in runs], args, check)

        old_points = OLD_POINTS // 10 if args.quick else OLD_POINTS
        old_logdir = os.path.join(root, f"old-{old_points}")
        if not os.path.isdir(old_logdir):
            started = time.perf_counter()
            write_old_run(os.path.join(old_logdir + ".partial", "job"), old_points)
            os.replace(old_logdir + ".partial", old_logdir)
            print(f"3. wrote 10 series x {old_points:,} points as the old monitor would "
                  f"({_dir_bytes(old_logdir) / 1e6:.0f} MB, {time.perf_counter() - started:.0f} s)")
        else:
            print(f"3. 10 series x {old_points:,} points ({_dir_bytes(old_logdir) / 1e6:.0f} MB, reused)")
        result = cli_analyze(old_logdir)
        (cli_run,) = result["report"]["runs"]
        print(f"  tb-leak analyze: {result['wall_s']:.2f} s, peak {result['peak_mb']:.0f} MB, "
              f"verdict {cli_run['verdict']}")
        if not args.skip_tensorboard:
            last_step = max(s["last_step"] for s in cli_run["series"])
            tiny = os.path.join(root, "tiny")
            if not os.path.isdir(tiny):
                write_old_run(os.path.join(tiny, "job"), 200)
            settle = 20.0 if args.quick else 100.0
            print(f"  tensorboard (--samples_per_plugin default leak={LOCAL_SAMPLES_PER_TAG} on a local logdir; "
                  f"peak RSS watched {settle:.0f} s past the report, while its loader reads on):")
            for load_fast in (False, True):
                base = tensorboard(tiny, "job", load_fast, None, settle_s=5.0, python=args.tensorboard_python)
                row = tensorboard(old_logdir, "job", load_fast, last_step, settle_s=settle,
                                  python=args.tensorboard_python)
                mode = f"--load_fast={'true' if load_fast else 'false'}"
                ready = row["ready_s"] or float("nan")
                complete = row["complete_s"]
                tiny_after = (base["complete_s"] - base["ready_s"]
                              if base["complete_s"] is not None and base["ready_s"] is not None else float("nan"))
                print(f"   {mode}: peak RSS {row['peak_mb']:.0f} MB, {row['peak_at_report_mb']:.0f} MB up to the report "
                      f"(tiny logdir: {base['peak_mb']:.0f} MB); "
                      f"ready {ready:.1f} s (tiny: {base['ready_s'] or float('nan'):.1f} s, its report "
                      f"{tiny_after:.1f} s after), first report "
                      f"{row['first_s'] or float('nan'):.1f} s ({row['first_verdict']}), complete report "
                      f"{complete if complete is not None else float('nan'):.1f} s "
                      f"({(complete - ready) if complete is not None else float('nan'):.1f} s after ready)")
                if row["report"] is not None:
                    kept = sorted({s.get("samples") for s in row["report"].get("series", [])})
                    print(f"   {mode}: points per series in the tab's report {kept} (CLI: "
                          f"{sorted({s.get('samples') for s in cli_run['series']})}), verdict "
                          f"{row['report'].get('verdict')} (CLI: {cli_run['verdict']})")
                check(f"{mode} RSS under {TB_RSS_TARGET_MB:.0f} MB", row["peak_mb"] < TB_RSS_TARGET_MB)
                check(f"{mode} RSS over a tiny logdir's under {TB_RSS_TARGET_MB:.0f} MB",
                      row["peak_mb"] - base["peak_mb"] < TB_RSS_TARGET_MB)
                check(f"{mode} complete report within {TB_REPORT_TARGET_S:.0f} s of ready",
                      complete is not None and complete - ready <= TB_REPORT_TARGET_S)
                same = row["report"] is not None and _verdicts(row["report"]) == _verdicts(cli_run)
                check(f"{mode} tab's verdicts equal the CLI's", same)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print("FAIL: " + ", ".join(failures) if failures else "all PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
