"""Heap walks of a short run at defaults, on an idle and on a contended machine.

The monitor's 2 s allowance is seconds of its own work: on a machine where
other processes take the cores a heap walk's wall time grows by their share,
so the allowance is scaled by the contention the walks measure (wall over
thread CPU time, at most ``MAX_CONTENTION``). This benchmark runs one loop of
the real-loop corpus (``benchmarks/loops.py``: a 0.5 ms eager step keeping its
EagerTensor, 2,000 steps) at default settings, each run in a fresh process:

* idle, and with ``--hogs`` busy processes taking the cores (default 3 on
  this 2-core machine: a load of about 4);
* with the allowance scaled (the default) and, side by side in the same run,
  with the scaling switched off (``MAX_CONTENTION = 1``: the allowance in
  wall seconds, as before).

For each it prints the median heap walks, the measured contention, and in
how many runs ``tb-leak analyze`` named a tensor culprit (``EagerTensor`` or
``eager``) in the top 3.

    python benchmarks/bench_contention.py [--repeats 3] [--hogs 3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIO = "eager_history-eager-0.5ms-2000"

_CHILD = """
import sys
sys.path.insert(0, {bench!r})
import tb_leak_plugin.capture.monitor as monitor_lib
monitor_lib.MAX_CONTENTION = {cap!r}
import loops
sys.exit(loops.main(["run", {name!r}, {logdir!r}]))
"""


def _hog():
    while True:
        pass


def _run(logdir: str, cap: float) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.pathsep.join([ROOT] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
    code = _CHILD.format(bench=os.path.join(ROOT, "benchmarks"), cap=cap, name=SCENARIO, logdir=logdir)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    result = {}
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
    report = subprocess.run([sys.executable, "-m", "tb_leak_plugin", "analyze", os.path.dirname(logdir),
                             "--format", "json"], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    run = json.loads(report.stdout)["runs"][0]
    names = " ".join(f"{c.get('kind', '')}:{c.get('name', '')}" for c in run.get("culprits", [])[:3])
    result["verdict"] = run["verdict"]
    result["tensor_culprit"] = "EagerTensor" in names or "eager" in names
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hogs", type=int, default=3)
    args = parser.parse_args(argv)
    from tb_leak_plugin.capture.monitor import MAX_CONTENTION

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for machine in ("idle", "contended"):
            hogs = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(args.hogs if machine == "contended"
                                                                                    else 0)]
            for hog in hogs:
                hog.start()
            try:
                results = {"scaled": [], "wall seconds (before)": []}
                for i in range(args.repeats):  # interleaved: both modes see the same machine
                    for mode, cap in (("scaled", MAX_CONTENTION), ("wall seconds (before)", 1.0)):
                        logdir = os.path.join(tmp, f"{machine}-{mode[:4]}-{i}", "run")
                        results[mode].append(_run(logdir, cap))
            finally:
                for hog in hogs:
                    hog.terminate()
            for mode, runs in results.items():
                rows.append((machine, mode, statistics.median(r.get("heap_walks", 0) for r in runs),
                             statistics.median(r.get("contention", 1.0) for r in runs),
                             sum(r["tensor_culprit"] for r in runs), len(runs),
                             statistics.median(r.get("wall_s", 0.0) for r in runs)))
    print(f"{SCENARIO} at defaults, {args.repeats} runs each, {args.hogs} busy processes when contended")
    print(f"{'machine':10s} {'allowance':22s} {'heap walks':>10s} {'contention':>10s} {'tensor culprit':>15s} "
          f"{'wall s':>7s}")
    for machine, mode, walks, contention, named, runs, wall in rows:
        print(f"{machine:10s} {mode:22s} {walks:10.0f} {contention:10.2f} {named:>9d} of {runs:<3d} {wall:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
