"""Run the tb-leak demo: real TensorFlow leak patterns and their fixes.

    python demo/run_demo.py [--logdir DIR] [--quick] [--patterns a,b] [--jobs N]

Writes two runs per pattern, ``<pattern>/leaky`` and ``<pattern>/fixed``,
into the logdir (default ``./tb-leak-demo``), prints the ``tb-leak analyze``
report, and the ``tensorboard`` command that shows it in the Leak tab.
Each pattern runs in its own process; ``plain_python`` in one where
TensorFlow cannot be imported.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MARKER = ".tb-leak-demo"


def _block_tensorflow() -> None:
    class _Block:
        def find_spec(self, name, path=None, target=None):
            if name == "tensorflow" or name.startswith("tensorflow."):
                raise ImportError("this demo pattern runs without TensorFlow")
            return None

    sys.meta_path.insert(0, _Block())


def worker(name: str, logdir: str, steps: int, profile: tuple[int, int] | None) -> int:
    sys.path.insert(0, ROOT)
    sys.path.insert(0, HERE)
    import patterns

    if name in patterns.NO_TENSORFLOW:
        _block_tensorflow()
    patterns.run_pattern(name, logdir, steps, profile)
    if name in patterns.NO_TENSORFLOW and "tensorflow" in sys.modules:
        print(f"{name}: TensorFlow was imported", file=sys.stderr)
        return 1
    return 0


def _prepare_logdir(logdir: str, names: list[str]) -> None:
    if os.path.isdir(logdir) and os.listdir(logdir) and not os.path.exists(os.path.join(logdir, MARKER)):
        raise SystemExit(f"run_demo: {logdir!r} is not empty and was not written by the demo; "
                         "pick another --logdir")
    os.makedirs(logdir, exist_ok=True)
    open(os.path.join(logdir, MARKER), "w").close()
    for name in names:
        shutil.rmtree(os.path.join(logdir, name), ignore_errors=True)


def _run_worker(name, logdir, steps, profile) -> tuple[str, int, float, str]:
    command = [sys.executable, os.path.abspath(__file__), "--worker", name, "--logdir", logdir,
               "--steps", str(steps)]
    if profile:
        command += ["--profile", f"{profile[0]}:{profile[1]}"]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": os.pathsep.join(
        [ROOT] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    return name, result.returncode, time.perf_counter() - started, result.stderr


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Run real TensorFlow leak patterns and their fixes.")
    parser.add_argument("--logdir", default="./tb-leak-demo", help="where to write runs (default ./tb-leak-demo)")
    parser.add_argument("--quick", action="store_true", help="shorter runs (for tests): 300 steps, a few minutes")
    parser.add_argument("--steps", type=int, default=None, help="training steps per run")
    parser.add_argument("--patterns", default=None, help="comma-separated subset of patterns")
    parser.add_argument("--jobs", type=int, default=2, help="patterns run in parallel (default 2)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--profile", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        profile = tuple(int(v) for v in args.profile.split(":")) if args.profile else None
        return worker(args.worker, args.logdir, args.steps, profile)

    sys.path.insert(0, HERE)
    import patterns

    names = list(patterns.PATTERNS)
    if args.patterns:
        names = [n.strip() for n in args.patterns.split(",") if n.strip()]
        unknown = [n for n in names if n not in patterns.PATTERNS]
        if unknown:
            parser.error(f"unknown pattern(s) {unknown}; choose from {list(patterns.PATTERNS)}")
    steps = args.steps or (300 if args.quick else 400)
    if steps < 60:
        parser.error("--steps must be at least 60 for a verdict")
    profile = (20, 40) if steps < 300 else (100, 130)
    logdir = os.path.abspath(args.logdir)
    _prepare_logdir(logdir, names)

    fewer = sorted(n for n in names if patterns.pattern_steps(n, steps) != steps)
    print(f"tb-leak demo: {len(names)} patterns x (leaky, fixed), {steps} steps each"
          + (f" ({', '.join(f'{n} {patterns.pattern_steps(n, steps)}' for n in fewer)})" if fewer else "")
          + f", into {logdir}")
    started = time.perf_counter()
    failures = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(_run_worker, name, logdir, steps, profile) for name in names]
        for future in concurrent.futures.as_completed(futures):
            name, code, seconds, stderr = future.result()
            status = "ok" if code == 0 else f"FAILED (exit {code})"
            print(f"  {name:<16} {status} in {seconds:.0f} s", flush=True)
            if code != 0:
                failures += 1
                print(stderr[-3000:], file=sys.stderr)
    print(f"all patterns written in {time.perf_counter() - started:.0f} s\n")

    sys.path.insert(0, ROOT)
    from tb_leak_plugin.reporting import cli

    cli.main(["analyze", logdir])
    print("See it in TensorBoard (the Leak tab):")
    print(f"  tensorboard --logdir {logdir}")
    print("then open http://localhost:6006/#leak")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
