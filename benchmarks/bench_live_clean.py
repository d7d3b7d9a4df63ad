"""A clean loop watched live: is it ever called a leak while it trains?

Runs a loop that keeps nothing (``time.sleep(step_s)`` and ``monitor.sample``
at default settings) in a child process for ``--seconds``, and every
``--every`` seconds analyses a copy of its live logdir, as someone watching
the Leak tab would see it; then the final report after ``close()``. With
``--keep N`` the loop keeps N bytes a step (a leak) instead, to show when it
is first called.

    python benchmarks/bench_live_clean.py [--seconds 600] [--every 30] [--step-ms 5] [--keep 0]

Targets (clean): never ``leak``; ``no_leak`` from the first few minutes on and
at the end. Prints one line per look and a summary.

``--replay RUNDIR ...`` looks at recorded runs instead (clean ones: the fixed
twins of ``benchmarks/heldout/run_heldout.py --logdir``): each is analysed as
it stood at ``--cuts`` evenly spaced steps (its points up to that step, as the
Leak tab read them while it trained) and at its end; prints the runs called
``leak`` at some look.

    python benchmarks/bench_live_clean.py --replay LOGDIR/*/fixed [--cuts 40]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CHILD = r"""
import sys, time
sys.path.insert(0, {root!r})
import tb_leak_plugin as tbleak
kept = []
monitor = tbleak.Monitor({logdir!r})
end = time.monotonic() + {seconds}
step = 0
while time.monotonic() < end:
    time.sleep({step_s})
    if {keep}:
        kept.append(bytearray({keep}))
    monitor.sample(step)
    step += 1
monitor.close()
print(step)
"""


def analyse(logdir: str):
    from tb_leak_plugin.reporting.logdir import analyze_logdir

    report = analyze_logdir(logdir, jobs=1)
    runs = report.to_dict()["runs"]
    return runs[0] if runs else None


def replay(rundirs, cuts: int) -> int:
    """Each recorded run's verdict at ``cuts`` evenly spaced steps and at its end."""
    import dataclasses

    from tb_leak_plugin.analysis.report import build_run_report
    from tb_leak_plugin.analysis.series import RunData
    from tb_leak_plugin.eventfile.reader import load_run

    ever, looked, finals = [], 0, {}
    for rundir in rundirs:
        if not os.path.isdir(rundir):
            print(f"{rundir}: not a directory, skipped")
            continue
        run = load_run(os.path.basename(os.path.dirname(rundir.rstrip("/"))) or rundir, rundir)
        ends = [int(s.steps[-1]) for s in run.series.values() if len(s.steps)]
        if not ends:
            print(f"{rundir}: no points")
            continue
        last, leaks = max(ends), []
        for k in range(1, cuts + 1):
            cut = last * k // cuts
            part = RunData(name=run.name, path=rundir)
            for tag, series in run.series.items():
                keep = series.steps <= cut
                part.series[tag] = dataclasses.replace(series, steps=series.steps[keep],
                                                       wall_times=series.wall_times[keep], values=series.values[keep])
            report = build_run_report(part)
            looked += 1
            if report.verdict == "leak":
                leaks.append((cut, report.reason))
        finals[rundir] = build_run_report(run).verdict
        if leaks:
            ever.append(rundir)
            print(f"{rundir}: leak at {len(leaks)} of {cuts} looks (steps {', '.join(str(c) for c, _ in leaks[:8])}"
                  f" of {last}), at its end {finals[rundir]}; first: {leaks[0][1][:160]}")
    ends = [v for v in finals.values()]
    print(f"runs: {len(finals)}; called leak at some look: {len(ever)}; at their end: leak {ends.count('leak')}, "
          f"no_leak {ends.count('no_leak')}, inconclusive {ends.count('inconclusive')} ({looked} looks)")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replay", nargs="+", metavar="RUNDIR", help="recorded runs to look at, instead of a new loop")
    parser.add_argument("--cuts", type=int, default=40, help="looks per recorded run (--replay)")
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--every", type=float, default=30.0)
    parser.add_argument("--step-ms", type=float, default=5.0)
    parser.add_argument("--keep", type=int, default=0, help="bytes kept per step (0: a clean loop)")
    args = parser.parse_args(argv)
    if args.replay:
        return replay(args.replay, max(1, args.cuts))
    work = tempfile.mkdtemp(prefix="tb-leak-live-")
    logdir = os.path.join(work, "run")
    code = CHILD.format(root=ROOT, logdir=logdir, seconds=args.seconds, step_s=args.step_ms / 1000.0,
                        keep=args.keep)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    started = time.monotonic()
    looks = []
    try:
        while child.poll() is None:
            time.sleep(max(0.0, args.every - (time.monotonic() - started) % args.every))
            if child.poll() is not None or not os.path.isdir(logdir):
                continue
            copy = os.path.join(work, f"look{len(looks)}")
            shutil.copytree(logdir, copy)
            run = analyse(copy)
            shutil.rmtree(copy, ignore_errors=True)
            if run is None:
                continue
            at = time.monotonic() - started
            looks.append((at, run["verdict"]))
            print(f"{at:6.0f} s  {run['verdict']:13s} {run['confidence']:.2f}  {run['reason'][:150]}", flush=True)
        steps = child.stdout.read().strip()
        final = analyse(logdir)
    finally:
        if child.poll() is None:
            child.kill()
        shutil.rmtree(work, ignore_errors=True)
    print(f"final ({steps} steps): {final['verdict']} {final['confidence']:.2f}  {final['reason'][:200]}")
    leaks = sum(v == "leak" for _, v in looks)
    first_clean = next((at for at, v in looks if v == "no_leak"), None)
    steady = next((at for i, (at, _) in enumerate(looks) if all(v == "no_leak" for _, v in looks[i:])), None)
    print(f"looks: {len(looks)}; leak {leaks}, no_leak {sum(v == 'no_leak' for _, v in looks)}, "
          f"inconclusive {sum(v == 'inconclusive' for _, v in looks)}; first no_leak at "
          f"{first_clean if first_clean is None else round(first_clean)} s; no_leak at every look from "
          f"{steady if steady is None else round(steady)} s")
    if not args.keep:
        print(f"targets: never leak: {'PASS' if leaks == 0 else 'FAIL'}; no_leak at the end: "
              f"{'PASS' if final['verdict'] == 'no_leak' else 'FAIL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
