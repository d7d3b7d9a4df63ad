"""Run the corpus of real training loops (benchmarks/loops.py) and judge tb-leak's verdicts.

    python benchmarks/bench_loops.py [--quick] [--only REGEX] [--logdir DIR] [--jobs N]

Each scenario runs in its own fresh interpreter (``python benchmarks/loops.py
run NAME <logdir>/NAME``) with the monitor at default settings; then
``tb-leak analyze <logdir> --format json`` judges every run. Prints one row per
scenario (kind, framework, target step time, steps, measured seconds of the
training loop, ms per step of the step itself, the monitor's time in
``sample()`` as a percentage of the step's, verdict, pass/fail, top-3
culprits) and the totals: leaks caught,
culprits right (an expected substring in a top-3 culprit's kind or name),
false alarms (a clean run called ``leak``), inconclusive runs, wall time.

A leak passes when it is called ``leak`` with a right culprit; a clean run
passes when it is not called ``leak``. Always exits 0.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import loops  # noqa: E402  (imports only the standard library)

LOOPS = os.path.join(HERE, "loops.py")
_STARTUP_S = {"no_tf": 1.5, "eager": 7.0, "tf_function": 7.0, "keras": 9.0}


def _env():
    path = [ROOT] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": os.pathsep.join(path)}


def run_one(name, logdir, timeout=900):
    """Run scenario ``name`` in a fresh interpreter into ``<logdir>/<name>``; returns a result dict."""
    run_dir = os.path.join(logdir, name)
    shutil.rmtree(run_dir, ignore_errors=True)
    started = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, LOOPS, "run", name, run_dir], capture_output=True, text=True,
                              env=_env(), cwd=ROOT, timeout=timeout)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = "timeout", exc.stdout or "", exc.stderr or ""
        out = out.decode() if isinstance(out, bytes) else out
        err = err.decode() if isinstance(err, bytes) else err
    result = {"name": name, "rc": rc, "process_s": time.perf_counter() - started}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            result.update(json.loads(line[len("RESULT "):]))
    if rc != 0:
        result["error"] = (err or out)[-1500:]
    return result


def run_many(names, logdir, jobs=2, timeout=900, progress=None):
    """Run scenarios (longest first, ``jobs`` at a time); returns {name: result}."""
    def expected_s(name):
        s = loops.SCENARIOS[name]
        retracing_s = 0.11 * s.steps if s.pattern == "retrace_float" else 0.0  # a trace per step
        return max(s.step_ms * s.steps / 1000.0, retracing_s) + _STARTUP_S[s.framework]

    order = sorted(names, key=expected_s, reverse=True)
    # Retraced tf.functions keep a core busy tracing: start them apart, not side by side.
    heavy = [n for n in order if loops.SCENARIOS[n].pattern == "retrace_float"]
    rest = [n for n in order if n not in heavy]
    order = []
    while heavy or rest:
        if heavy:
            order.append(heavy.pop(0))
        order.extend(rest[:max(1, jobs)])
        del rest[:max(1, jobs)]
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max(1, jobs)) as pool:
        futures = {pool.submit(run_one, name, logdir, timeout): name for name in order}
        for future in concurrent.futures.as_completed(futures):
            result = future.result()
            results[result["name"]] = result
            if progress:
                progress(result)
    return results


def analyze(logdir, timeout=900):
    """``tb-leak analyze LOGDIR --format json`` (as ``python -m tb_leak_plugin``); returns ({run: report}, s)."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "tb_leak_plugin", "analyze", logdir, "--format", "json"],
                          capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=timeout)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"tb-leak analyze failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return {run["run"]: run for run in json.loads(proc.stdout)["runs"]}, seconds


def judge(scenario, report):
    """(verdict, culprit_right, passed) of one scenario's report (None when the run is missing)."""
    if report is None:
        return "missing", False, False
    verdict = report.get("verdict")
    culprits = report.get("culprits") or []
    if scenario.kind == "leak":
        right = loops.culprit_right(scenario, culprits)
        return verdict, right, verdict == "leak" and right
    return verdict, False, verdict != "leak"


def _short(text, width):
    return text if len(text) <= width else text[:width - 1] + "~"


def print_table(names, results, reports):
    header = (f"{'scenario':40s} {'kind':5s} {'fw':11s} {'step':>5s} {'steps':>6s} {'train_s':>7s} "
              f"{'ms/st':>6s} {'mon%':>5s} {'verdict':12s} {'pass':4s}  top-3 culprits")
    print(header)
    print("-" * len(header))
    totals = {"leaks": 0, "caught": 0, "culprit_right": 0, "leak_passed": 0, "leak_inconclusive": 0,
              "cleans": 0, "false_alarms": 0, "clean_inconclusive": 0, "failed_runs": 0}
    rows = []
    for name in names:
        s = loops.SCENARIOS[name]
        result = results.get(name, {})
        report = reports.get(name)
        verdict, right, passed = judge(s, report)
        if result.get("rc") not in (0, None):
            totals["failed_runs"] += 1
        culprits = (report or {}).get("culprits") or []
        top = ", ".join(_short(loops.culprit_label(c), 48) for c in culprits[:3]) or "-"
        if s.kind == "leak":
            totals["leaks"] += 1
            totals["caught"] += verdict == "leak"
            totals["culprit_right"] += verdict == "leak" and right
            totals["leak_passed"] += passed
            totals["leak_inconclusive"] += verdict == "inconclusive"
            mark = "PASS" if passed else ("cul?" if verdict == "leak" else "FAIL")
        else:
            totals["cleans"] += 1
            totals["false_alarms"] += verdict == "leak"
            totals["clean_inconclusive"] += verdict == "inconclusive"
            mark = "PASS" if passed else "FAIL"
        train_s = result.get("train_s")
        ms = result.get("work_ms_per_step")  # the step itself, the monitor's time taken out
        monitor_s = result.get("monitor_s")
        overhead = (100.0 * monitor_s / max(train_s - monitor_s, 1e-9)
                    if train_s is not None and monitor_s is not None else None)
        print(f"{name:40s} {s.kind:5s} {s.framework:11s} {s.step_ms:>5g} {s.steps:>6d} "
              f"{(f'{train_s:.1f}' if train_s is not None else '-'):>7s} "
              f"{(f'{ms:.3g}' if ms is not None else '-'):>6s} "
              f"{(f'{overhead:.1f}' if overhead is not None else '-'):>5s} {verdict:12s} {mark:4s}  {top}")
        if result.get("error"):
            print("    run failed:", result["error"].strip().splitlines()[-1][:200])
        rows.append({"name": name, "kind": s.kind, "verdict": verdict, "passed": passed, "culprit_right": right,
                     "train_s": train_s, "work_ms_per_step": ms, "monitor_s": monitor_s, "top3": [loops.culprit_label(c) for c in culprits[:3]]})
    return totals, rows


def main(argv=None):
    parser = argparse.ArgumentParser(description="Run the real-loop corpus and judge tb-leak's verdicts.")
    parser.add_argument("--quick", action="store_true", help=f"only the quick slice ({len(loops.QUICK)} runs)")
    parser.add_argument("--only", help="only scenarios whose name matches this regex")
    parser.add_argument("--logdir", help="where to write runs (default: a new temporary directory)")
    parser.add_argument("--jobs", type=int, default=2, help="scenarios run in parallel (default 2)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per scenario (default 900)")
    parser.add_argument("--json", help="also write the rows and totals to this JSON file")
    args = parser.parse_args(argv)
    try:
        return _main(args)
    except Exception as exc:  # the benchmark reports, it never fails a pipeline
        print(f"bench_loops: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 0


def _main(args):
    wall = time.perf_counter()
    names = list(loops.QUICK) if args.quick else list(loops.SCENARIOS)
    if args.only:
        pattern = re.compile(args.only)
        names = [n for n in names if pattern.search(n)]
    if not names:
        print("bench_loops: no scenario selected")
        return 0
    logdir = os.path.abspath(args.logdir) if args.logdir else tempfile.mkdtemp(prefix="tb-leak-loops-")
    os.makedirs(logdir, exist_ok=True)
    print(f"bench_loops: {len(names)} scenarios into {logdir}, {args.jobs} at a time", flush=True)

    def progress(result):
        status = "ok" if result["rc"] == 0 else f"FAILED rc={result['rc']}"
        train = result.get("train_s")
        print(f"  ran {result['name']:40s} {result['process_s']:6.1f} s "
              f"(training {train:.1f} s) {status}" if train is not None else
              f"  ran {result['name']:40s} {result['process_s']:6.1f} s {status}", flush=True)

    runs_started = time.perf_counter()
    results = run_many(names, logdir, args.jobs, args.timeout, progress)
    runs_s = time.perf_counter() - runs_started
    reports, analyze_s = analyze(logdir, args.timeout)
    print()
    totals, rows = print_table(names, results, reports)
    wall_s = time.perf_counter() - wall
    t = totals
    print()
    print(f"leaks caught:     {t['caught']}/{t['leaks']}   (inconclusive {t['leak_inconclusive']})")
    print(f"culprits right:   {t['culprit_right']}/{t['leaks']}   (leak with an expected top-3 culprit)")
    print(f"false alarms:     {t['false_alarms']}/{t['cleans']}   (clean inconclusive {t['clean_inconclusive']})")
    print(f"inconclusive:     {t['leak_inconclusive'] + t['clean_inconclusive']}/{len(names)}")
    print(f"passed:           {t['leak_passed'] + t['cleans'] - t['false_alarms']}/{len(names)}"
          + (f"   runs failed: {t['failed_runs']}" if t["failed_runs"] else ""))
    print(f"training (sum):   {sum(r['train_s'] or 0 for r in rows):.0f} s, of it in monitor.sample "
          f"{sum(r['monitor_s'] or 0 for r in rows):.1f} s")
    print(f"wall time:        {wall_s:.0f} s (runs {runs_s:.0f} s with {args.jobs} jobs, analyze {analyze_s:.1f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"logdir": logdir, "rows": rows, "totals": totals, "wall_s": wall_s}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
