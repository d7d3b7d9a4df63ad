"""Cost of the Monitor: per-probe cost, census cost, overhead on a real loop.

    python benchmarks/bench_monitor.py [--quick] [--long] [--blocks 16] [--block-steps 300]

Prints:
  * cost of one sample of each cheap probe (µs, median);
  * census cost per million gc-tracked objects (ms, median);
  * the monitor's overhead on a small tf.function training loop, measured
    A/B in one run: blocks of steps without the monitor, with the monitor at
    defaults, and with tracemalloc running (the peer), interleaved so that
    machine noise hits all three alike. Medians of per-block step times;
  * the full heap sample the Monitor takes (gc.collect + one object list
    shared by the probes objects, tensors, tf_function, tf_graphs_held) vs
    the plain census (gc.collect + object list + count by type) on a
    TensorFlow + Keras heap of ~1.3 M gc-tracked objects, with a breakdown;
  * runs of 2 s and 30 s of training (5 and 30 min with ``--long``) of a real
    4 ms-step Keras loop (``train_on_batch`` plus numpy augmentation) that
    keeps one 256 KiB tensor a step, each in its own interpreter with
    ``tbleak.Monitor(logdir)`` at defaults: samples per probe group, the
    monitor's own accounting, an A/B slowdown against the same loop without
    the monitor (same steps, own interpreter, alternating order: the first
    run of a pair trains for the length, the second takes as many steps),
    and the seconds of training until ``tb-leak analyze`` (polled every ~2 s
    while the child trains; the child writes its training seconds to a side
    file every 0.5 s) first says ``leak`` with a tensor culprit in its top 3;
    the clean twin (keeps ``float(loss)``) of the 30 s run and its verdict.
    The augmentation is calibrated once, by the first run, so that the leaky
    step takes ~4 ms on average (0 repetitions when the step alone is slower);
  * a summary table.
Targets: overhead <= 1% of step time at defaults; census <= 100 ms per
million tracked objects; full heap sample <= 1.5x the plain census; per
training run, monitor time <= 1% of training + 2 s; the leak reported with a
tensor culprit within 15 s of training; the clean twin not called ``leak``.
``--quick``: the 2 s and 30 s runs only, fewer A/B blocks (a few minutes).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
import timeit
import tracemalloc

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def probe_costs() -> dict[str, float]:
    from tb_leak_plugin.capture import probes

    costs = {}
    for factory in (probes.ProcessProbe, probes.PythonHeapProbe, probes.TFAllocatorProbe, probes.GCProbe):
        probe = factory()
        probe.sample()
        runs = [timeit.timeit(probe.sample, number=200) / 200 for _ in range(7)]
        costs[probe.name] = statistics.median(runs) * 1e6
    return costs


def census_cost_per_million(extra_objects: int = 1_000_000) -> tuple[float, int, float]:
    """Median ms of (gc walk + type census) scaled to one million tracked objects."""
    from tb_leak_plugin.capture import probes

    ballast = [[] for _ in range(extra_objects)]  # gc-tracked objects
    probe = probes.ObjectCensusProbe()
    probe.sample(probes.collect_objects())  # baseline census, like a monitor's first
    timings = []
    count = 0
    for _ in range(5):
        started = time.perf_counter()
        census = probes.collect_objects()
        count = len(census.objects)
        probe.sample(census)
        census.release()
        timings.append(time.perf_counter() - started)
    del ballast
    gc.collect()
    median_s = statistics.median(timings)
    return median_s * 1e3 / (count / 1e6), count, median_s * 1e3


def build_loop():
    import tensorflow as tf

    import keras

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(10)])
    optimizer = keras.optimizers.SGD(0.01)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x = tf.random.normal([64, 64])
    y = tf.random.uniform([64], maxval=10, dtype=tf.int32)

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    train_step()
    return train_step


def ab_overhead(blocks: int, block_steps: int) -> dict:
    import tb_leak_plugin as tbleak

    train_step = build_loop()
    for _ in range(200):  # warm up caches and the allocator
        train_step()
    logdir = tempfile.mkdtemp(prefix="tbleak-bench-")
    monitor = tbleak.Monitor(logdir)  # defaults: 1% budget, all default probes
    times = {"baseline": [], "monitor": [], "tracemalloc": []}
    step = 0

    def block(mode):
        nonlocal step
        if mode == "tracemalloc":
            tracemalloc.start()
        started = time.perf_counter()
        for _ in range(block_steps):
            train_step()
            if mode == "monitor":
                monitor.sample(step)
            step += 1
        elapsed = time.perf_counter() - started
        if mode == "tracemalloc":
            tracemalloc.stop()
        times[mode].append(elapsed / block_steps)

    # A/B pairs in alternating order (ABBA...), so drift cancels; the peer
    # (tracemalloc) runs in its own blocks afterwards, since stopping it
    # leaves the allocator and caches disturbed for the block that follows.
    for pair in range(blocks):
        for mode in (("baseline", "monitor") if pair % 2 == 0 else ("monitor", "baseline")):
            block(mode)
    for _ in range(max(3, blocks // 3)):
        block("baseline")
        block("tracemalloc")
    monitor.close()
    medians = {mode: statistics.median(values) for mode, values in times.items()}
    # Paired: each monitor block against the baseline block beside it.
    paired = [m / b - 1 for m, b in zip(times["monitor"], times["baseline"][:blocks])]
    paired_tm = [t / b - 1 for t, b in zip(times["tracemalloc"], times["baseline"][blocks:])]
    return {
        "step_ms": {mode: value * 1e3 for mode, value in medians.items()},
        "monitor_overhead": statistics.median(paired),
        "median_ratio_overhead": medians["monitor"] / statistics.median(times["baseline"][:blocks]) - 1,
        "tracemalloc_overhead": statistics.median(paired_tm),
        "self_measured": monitor.stats(),
        "steps": step,
    }


# ---------------------------------------------------------------------------------------------
# Full heap sample (what the Monitor's heap group does) vs the plain census.

HEAP_PROBES = ("objects", "tensors", "tf_function", "tf_graphs_held")


def _small_keras_model(seed: int = 0):
    import keras
    import numpy as np

    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer="sgd", loss="mse")
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 32)).astype("float32")
    y = rng.standard_normal((64, 10)).astype("float32")
    return model, x, y


class _Timed:
    """Wraps a function (or a method: ``wrapper`` is a plain function, so it
    binds like one) and adds the seconds spent in it to ``self.seconds``."""

    def __init__(self, function):
        self.function = function
        self.seconds = 0.0
        self.calls = 0

        def wrapper(*args, **kwargs):
            self.calls += 1
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        self.wrapper = wrapper


def heap_sample_vs_census(reps: int = 9, breakdown_reps: int = 6, target_objects: int = 1_300_000) -> dict:
    """Median seconds of the plain census and of the Monitor's full heap sample
    on a TensorFlow + Keras heap padded to ``target_objects`` gc-tracked
    objects, and a breakdown of each (medians of instrumented runs)."""
    from tb_leak_plugin.capture import probes

    model, x, y = _small_keras_model()
    for _ in range(5):  # a few real training steps: Keras' train function traced and run
        model.train_on_batch(x, y)
    kept = [model(x[:4], training=False) for _ in range(8)]  # a few live eager tensors
    gc.collect()
    present = len(gc.get_objects())
    # Ballast like the census section's: plain lists (gc-tracked). Lists are
    # also what the tensors probe searches for numpy arrays, so this is not
    # kind to the full sample.
    ballast = [[] for _ in range(max(0, target_objects - present))]

    census_probe = probes.ObjectCensusProbe()
    heap_probes = probes.make_probes(list(HEAP_PROBES))

    def plain() -> float:
        started = time.perf_counter()
        gc.collect()
        census = probes.collect_objects()
        census_probe.sample(census)
        census.release()
        return time.perf_counter() - started

    def full() -> float:  # as Monitor._run_units: announce every probe, then sample every probe
        started = time.perf_counter()
        gc.collect()
        census = probes.collect_objects()
        for probe in heap_probes:
            probe.announce(census)
        for probe in heap_probes:
            probe.sample(census)
        census.release()
        return time.perf_counter() - started

    plain()  # first census of each: picks the followed types, fills the holder cache
    full()
    plain_s, full_s = [], []
    for rep in range(reps):
        order = (plain, full) if rep % 2 == 0 else (full, plain)
        for run in order:
            (plain_s if run is plain else full_s).append(run())
    objects = len(gc.get_objects())

    # Breakdown: the same steps, each timed; the census' one-pass selection of
    # announced types and the numpy scan inside the tensors probe are wrapped.
    select = _Timed(probes.Census._select)
    numpy_scan = _Timed(probes._numpy_arrays)
    parts_plain: dict[str, list] = {}
    parts_full: dict[str, list] = {}
    numpy_runs: list = []  # the numpy scan's seconds, on the walks where it ran
    numpy_skips = [0]  # walks on which the probe skipped it (its own cost-based schedule)

    def add(parts, name, seconds):
        parts.setdefault(name, []).append(seconds)

    probes.Census._select = select.wrapper
    probes._numpy_arrays = numpy_scan.wrapper
    try:
        for _ in range(max(3, breakdown_reps)):
            for parts, probe_list in ((parts_plain, None), (parts_full, heap_probes)):
                select.seconds = numpy_scan.seconds = 0.0
                t0 = time.perf_counter()
                gc.collect()
                t1 = time.perf_counter()
                census = probes.collect_objects()
                t2 = time.perf_counter()
                census.by_type()  # type of every object, counted (shared by every probe)
                t3 = time.perf_counter()
                add(parts, "gc.collect()", t1 - t0)
                add(parts, "gc.get_objects()", t2 - t1)
                add(parts, "walk + count by type", t3 - t2)
                if probe_list is None:
                    census_probe.sample(census)
                    add(parts, "objects: name types, pick", time.perf_counter() - t3)
                else:
                    t = time.perf_counter()
                    for probe in probe_list:
                        probe.announce(census)
                    add(parts, "announce (4 probes)", time.perf_counter() - t)
                    for probe in probe_list:
                        t = time.perf_counter()
                        scan_before, select_before = numpy_scan.seconds, select.seconds
                        scans_before = numpy_scan.calls
                        probe.sample(census)
                        spent = time.perf_counter() - t
                        if probe.name == "tensors":
                            scan = numpy_scan.seconds - scan_before
                            chosen = select.seconds - select_before
                            add(parts, "tensors: select announced types (one pass)", chosen)
                            add(parts, "tensors: eager tensors, count + bytes", spent - scan - chosen)
                            if numpy_scan.calls > scans_before:
                                numpy_runs.append(scan)
                            else:
                                numpy_skips[0] += 1
                        elif probe.name == "objects":
                            add(parts, "objects: name types, pick", spent)
                        else:
                            add(parts, f"{probe.name}", spent - (select.seconds - select_before))
                            if select.seconds - select_before > 0:
                                add(parts, f"{probe.name}: select", select.seconds - select_before)
                t = time.perf_counter()
                census.release()
                add(parts, "release", time.perf_counter() - t)
                add(parts, "total", time.perf_counter() - t0)
    finally:
        probes.Census._select = select.function
        probes._numpy_arrays = numpy_scan.function
    del ballast, kept, model
    gc.collect()
    plain_median, full_median = statistics.median(plain_s), statistics.median(full_s)
    return {
        "objects": objects,
        "plain_s": plain_median,
        "full_s": full_median,
        "ratio": full_median / plain_median,
        "mean_ratio": statistics.fmean(full_s) / statistics.fmean(plain_s),
        "numpy_runs": numpy_runs,
        "numpy_skips": numpy_skips[0],
        "plain_all": plain_s,
        "full_all": full_s,
        "breakdown_plain": {k: statistics.median(v) for k, v in parts_plain.items()},
        "breakdown_full": {k: statistics.median(v) for k, v in parts_full.items()},
    }


# ---------------------------------------------------------------------------------------------
# Runs of a real 4 ms-step Keras loop, each in its own interpreter.

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STEP_MS = 4.0
LEAK_CAP_BYTES = 3 << 30  # beyond this (--long runs only) the leak keeps a 4-byte tensor a step
SIDE_EVERY_S = 0.5
POLL_EVERY_S = 2.0


def _child_env() -> dict:
    path = [ROOT] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": os.pathsep.join(path)}


def _write_json_atomic(path: str, value) -> None:
    import json

    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(value, handle)
    os.replace(tmp, path)


def child_main(spec_path: str) -> int:
    """One training run (run in a fresh interpreter by the parent)."""
    import json

    with open(spec_path) as handle:
        spec = json.load(handle)
    import numpy as np
    import tensorflow as tf

    import tb_leak_plugin as tbleak

    model, x, y = _small_keras_model(spec.get("seed", 0))
    rng = np.random.default_rng(0)
    dim = 64  # below OpenBLAS' threading threshold: one core, like a data-loading thread's work
    kernel = rng.standard_normal((dim, dim)) / np.sqrt(dim)
    state = {"image": rng.standard_normal((dim, dim))}
    noise = rng.standard_normal((16, 64, 32)).astype("float32") * 0.01

    def work(step, reps):
        image = state["image"]
        for _ in range(reps):  # input augmentation: real work that pads the step to ~4 ms
            image = np.tanh(image @ kernel)
        state["image"] = image
        return model.train_on_batch(x + noise[step % 16], y)

    for step in range(30):  # warm up: trace Keras' train function, fill caches
        work(step, 1)
    reps = spec.get("reps")
    calibrated_ms = None
    if reps is None:
        scratch = []

        def leaky_step(step, reps):
            work(step, reps)
            scratch.append(tf.random.uniform((256, 256)))
            if len(scratch) >= 400:  # bounded: calibration must not hold gigabytes
                scratch.clear()

        reps, calibrated_ms = _calibrate(leaky_step, STEP_MS / 1e3)
        del scratch

    leaky = spec["mode"] == "leak"
    kept = []
    kept_bytes = 0
    monitor = tbleak.Monitor(spec["logdir"]) if spec["monitor"] else None
    side = spec["side_file"]
    steps = spec.get("steps")  # a step count (the A/B runs), or None: train for spec["train_seconds"]
    train_limit = spec.get("train_seconds")
    in_monitor = 0.0
    _write_json_atomic(side, {"train_s": 0.0, "step": 0, "done": False})
    load_start = os.getloadavg()[0]
    cpu_started = time.process_time()
    started = time.perf_counter()
    next_side = started + SIDE_EVERY_S
    done = 0  # steps taken
    while steps is None or done < steps:
        step = done
        loss = work(step, reps)
        if leaky:
            if kept_bytes < LEAK_CAP_BYTES:
                kept.append(tf.random.uniform((256, 256)))  # the leak: 256 KiB a step
                kept_bytes += 256 * 256 * 4
            else:
                kept.append(tf.random.uniform((1,)))  # --long runs: still one tensor a step, 4 bytes
        else:
            kept.append(float(loss))  # the clean twin
        if monitor is not None:
            t = time.perf_counter()
            monitor.sample(step)
            in_monitor += time.perf_counter() - t
        done += 1
        now = time.perf_counter()
        if train_limit is not None and now - started - in_monitor >= train_limit:
            break
        if now >= next_side:
            _write_json_atomic(side, {"train_s": now - started - in_monitor, "step": done, "done": False})
            next_side = now + SIDE_EVERY_S
    loop_s = time.perf_counter() - started
    loop_cpu_s = time.process_time() - cpu_started
    load_end = os.getloadavg()[0]
    train_s = loop_s - in_monitor
    steps = done
    _write_json_atomic(side, {"train_s": train_s, "step": steps, "done": False, "closing": True})
    close_s = 0.0
    stats = None
    if monitor is not None:
        t = time.perf_counter()
        monitor.close()
        close_s = time.perf_counter() - t
        stats = monitor.stats()
    result = {"steps": steps, "reps": reps, "calibrated_step_ms": calibrated_ms, "loop_s": loop_s,
              "train_s": train_s, "in_sample_s": in_monitor, "close_s": close_s, "stats": stats,
              "kept": len(kept), "kept_bytes": kept_bytes, "loop_cpu_s": loop_cpu_s,
              "load": [load_start, load_end]}
    _write_json_atomic(spec["result_file"], result)
    _write_json_atomic(side, {"train_s": train_s, "step": steps, "done": True})
    return 0


def _calibrate(step, target_s: float) -> tuple[int, float]:
    """Augmentation repetitions so that ``step(i, reps)`` (the leaky loop's whole
    step: augmentation, train_on_batch, the kept tensor) takes about
    ``target_s`` on average: the median of three blocks' mean step time,
    so that the collector's passes and fresh pages count as in the loop."""

    def step_s(reps, block_s=0.2):
        means = []
        for _ in range(3):
            n = 0
            started = time.perf_counter()
            while n < 10 or time.perf_counter() - started < block_s:
                step(n, reps)
                n += 1
            means.append((time.perf_counter() - started) / n)
        return statistics.median(means)

    base = step_s(0)
    if base >= target_s:
        return 0, base * 1e3
    unit = max((step_s(20) - base) / 20, 1e-7)
    reps = max(1, round((target_s - base) / unit))
    for _ in range(2):
        measured = step_s(reps)
        if measured > base:
            unit = (measured - base) / reps
            reps = max(1, round((target_s - base) / unit))
    return reps, step_s(reps) * 1e3


def _read_json(path: str):
    import json

    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _tensor_culprit(culprit: dict) -> bool:
    return ("EagerTensor" in str(culprit.get("name", "")) or culprit.get("kind") == "tensors"
            or culprit.get("hint") == "tensors_kept")


def _analyze(logdir: str) -> dict | None:
    """``tb-leak analyze LOGDIR --format json --no-traces``: the first run's report, or None."""
    import json
    import subprocess

    try:
        proc = subprocess.run([sys.executable, "-m", "tb_leak_plugin", "analyze", logdir, "--format", "json",
                               "--no-traces"], capture_output=True, text=True, env=_child_env(), cwd=ROOT,
                              timeout=120)
        report = json.loads(proc.stdout)
    except Exception:
        return None
    runs = report.get("runs") or []
    if not runs:
        return None
    run = runs[0]
    top = run.get("culprits", [])[:3]
    return {"verdict": run.get("verdict"), "samples": run.get("samples"),
            "tensor_culprit": any(_tensor_culprit(c) for c in top),
            "top3": [f"{c.get('kind')}:{c.get('name')}" for c in top],
            "evidence": str(top[0].get("evidence", ""))[:200] if top else "",
            "reason": str(run.get("reason", ""))[:200]}


def run_child(workdir: str, name: str, mode: str, monitor: bool, steps, reps, poll: bool,
              train_seconds: float | None = None) -> dict:
    """One training run in a fresh interpreter; with ``poll``, ``tb-leak analyze``
    every ~2 s while it trains (and once after it exits)."""
    import subprocess

    run_dir = os.path.join(workdir, name)
    os.makedirs(run_dir, exist_ok=True)
    logdir = os.path.join(run_dir, "logdir")
    spec = {"mode": mode, "monitor": monitor, "steps": steps, "train_seconds": train_seconds, "reps": reps,
            "logdir": logdir,
            "side_file": os.path.join(run_dir, "train_s.json"), "result_file": os.path.join(run_dir, "result.json")}
    spec_path = os.path.join(run_dir, "spec.json")
    _write_json_atomic(spec_path, spec)
    started = time.perf_counter()
    with open(os.path.join(run_dir, "child.log"), "w") as log:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", spec_path], stdout=log,
                                stderr=subprocess.STDOUT, env=_child_env(), cwd=ROOT)
        polls = []
        if poll:
            while proc.poll() is None:
                poll_started = time.perf_counter()
                before = _read_json(spec["side_file"])
                if before is not None and os.path.isdir(logdir):
                    report = _analyze(logdir)
                    after = _read_json(spec["side_file"]) or before
                    if report is not None:
                        report.update(train_s_start=before["train_s"], train_s_end=after["train_s"],
                                      training_over=bool(after.get("closing") or after.get("done")))
                        polls.append(report)
                left = POLL_EVERY_S - (time.perf_counter() - poll_started)
                if left > 0:
                    try:
                        proc.wait(timeout=left)
                    except subprocess.TimeoutExpired:
                        pass
        rc = proc.wait()
    result = _read_json(spec["result_file"]) or {}
    result.update(name=name, mode=mode, monitor=monitor, rc=rc, process_s=time.perf_counter() - started,
                  polls=polls)
    if rc != 0 or not result.get("steps"):
        with open(os.path.join(run_dir, "child.log")) as log:
            result["error"] = log.read()[-2000:]
        return result
    if monitor:
        final = _analyze(logdir)
        result["final"] = final
        if final is not None:
            final.update(train_s_start=result["train_s"], train_s_end=result["train_s"], training_over=True)
            polls.append(dict(final, after_exit=True))
    detected = next((p for p in polls if p["verdict"] == "leak" and p["tensor_culprit"]), None)
    any_leak = next((p for p in polls if p["verdict"] == "leak"), None)
    result["detected"] = detected
    result["first_leak"] = any_leak
    return result


def length_label(seconds: float) -> str:
    return f"{seconds:g} s" if seconds < 60 else f"{seconds / 60:g} min"


def training_runs(lengths: list[float], pairs: dict, workdir: str) -> dict:
    """For each length: the polled leaky run, A/B pairs, and (for 30 s) the clean twin."""
    out = {"lengths": [], "reps": None, "calibrated_step_ms": None}
    reps = None
    for length in lengths:
        label = length_label(length)
        tag = label.replace(" ", "")
        entry = {"length_s": length, "label": label, "ab": []}
        wall = time.perf_counter()
        # The polled run, the clean twin and the first run of each A/B pair
        # train for `length` seconds (the monitor's time not counted); the
        # second run of a pair takes as many steps as the first.
        run = run_child(workdir, f"{tag}_leak_polled", "leak", True, None, reps, poll=True, train_seconds=length)
        entry["steps"] = run.get("steps")
        if reps is None and run.get("reps") is not None:  # the first run calibrates for all the others
            reps = out["reps"] = run["reps"]
            out["calibrated_step_ms"] = run.get("calibrated_step_ms")
        entry["detection"] = run
        for pair in range(pairs.get(length, 1)):
            order = (False, True) if pair % 2 == 0 else (True, False)
            results = {}
            for i, monitored in enumerate(order):
                name = f"{tag}_ab{pair}_{'monitor' if monitored else 'base'}"
                if i == 0:
                    results[monitored] = run_child(workdir, name, "leak", monitored, None, reps, poll=False,
                                                   train_seconds=length)
                else:
                    results[monitored] = run_child(workdir, name, "leak", monitored,
                                                   results[order[0]].get("steps") or 1, reps, poll=False)
            entry["ab"].append({"base": results[False], "monitor": results[True],
                                "order": "base, monitor" if order[0] is False else "monitor, base"})
        if length == 30:
            entry["clean"] = run_child(workdir, f"{tag}_clean_polled", "clean", True, None, reps, poll=True,
                                       train_seconds=length)
        entry["wall_s"] = time.perf_counter() - wall
        out["lengths"].append(entry)
        print_length(entry)
    return out


def _load_text(run: dict) -> str:
    load = run.get("load") or [float("nan")] * 2
    return f"{load[0]:.1f}->{load[1]:.1f}"


def _runs_text(stats: dict | None) -> str:
    if not stats:
        return "-"
    return ", ".join(f"{name} {unit['runs']}" for name, unit in stats["units"].items())


def _own_ok(run: dict) -> tuple[float, float, bool]:
    stats = run["stats"]
    spent, train = stats["monitor_seconds"], stats["train_seconds"]
    return spent, train, spent <= 0.01 * train + 2.0


def _ab_figures(pair: dict) -> tuple[float, float, bool]:
    base, mon = pair["base"], pair["monitor"]
    extra = mon["loop_s"] + mon["close_s"] - base["loop_s"]
    return extra / base["loop_s"], extra, extra <= 0.01 * base["loop_s"] + 2.0


def _failed(run: dict) -> bool:
    return run.get("rc") != 0 or "error" in run


def print_length(entry: dict) -> None:
    label = entry["label"]
    print(f"== {label} of training: a 4 ms-step Keras loop keeping one 256 KiB tensor a step "
          f"(wall {entry['wall_s']:.0f} s for this length)")
    run = entry["detection"]
    if _failed(run):
        print(f"  polled run FAILED (rc {run.get('rc')}):\n{run.get('error', '')}")
        return
    spent, train, ok = _own_ok(run)
    print(f"  polled run: {run['steps']:,} steps, training {run['train_s']:.2f} s "
          f"({run['train_s'] / run['steps'] * 1e3:.2f} ms a step), loop {run['loop_s']:.2f} s; "
          f"samples per group: {_runs_text(run['stats'])}; 1-min load average {_load_text(run)}")
    print(f"    monitor's own accounting: {spent:.3f} s = {spent / train:.2%} of {train:.2f} s training "
          f"(close() {run['close_s'] * 1e3:.0f} ms); target <= 1% + 2 s: {'PASS' if ok else 'FAIL'}")
    polls = [p for p in run["polls"] if not p.get("after_exit")]
    print(f"    analyze polls while training: {len(polls)}; verdicts: "
          + (", ".join(f"{p['train_s_end']:.1f}s:{p['verdict']}" for p in polls[:12]) or "-")
          + (" ..." if len(polls) > 12 else ""))
    detected = run.get("detected")
    if detected is not None:
        where = "after the child exited (final report)" if detected.get("after_exit") else (
            "while closing" if detected.get("training_over") else "while training")
        print(f"    first `leak` with a tensor culprit: {detected['train_s_end']:.1f} s of training "
              f"(poll began at {detected['train_s_start']:.1f} s; {where}); top 3: {detected['top3']}; "
              f"target <= 15 s: {'PASS' if detected['train_s_end'] <= 15 else 'FAIL'}")
    else:
        final = run.get("final") or {}
        print(f"    never `leak` with a tensor culprit (final verdict {final.get('verdict')}, "
              f"top 3 {final.get('top3')}); target <= 15 s: FAIL")
    first_leak = run.get("first_leak")
    if first_leak is not None and first_leak is not detected:
        print(f"    (first `leak` of any culprit: {first_leak['train_s_end']:.1f} s, top 3 {first_leak['top3']}; "
              f"first culprit's evidence: {first_leak.get('evidence')!r})")
    for i, pair in enumerate(entry["ab"]):
        if _failed(pair["base"]) or _failed(pair["monitor"]):
            print(f"  A/B pair {i}: FAILED\n{pair['base'].get('error') or pair['monitor'].get('error')}")
            continue
        slowdown, extra, ok = _ab_figures(pair)
        mon = pair["monitor"]
        print(f"  A/B pair {i} ({pair['order']}; {mon['steps']:,} steps, "
              f"{pair['base']['loop_s'] / pair['base']['steps'] * 1e3:.2f} ms a step without the monitor): "
              f"base loop {pair['base']['loop_s']:.2f} s | monitor loop "
              f"{mon['loop_s']:.2f} s + close {mon['close_s']:.2f} s -> {slowdown:+.2%} ({extra:+.2f} s); "
              f"own accounting {mon['stats']['monitor_seconds']:.2f} s = {mon['stats']['overhead']:.2%} "
              f"({'PASS' if _own_ok(mon)[2] else 'FAIL'} <= 1% + 2 s); samples: {_runs_text(mon['stats'])}")
        base = pair["base"]
        own_s = mon["in_sample_s"] + mon["close_s"]
        print(f"    of the {extra:+.2f} s: {own_s:.2f} s inside sample()/close(), "
              f"{mon['train_s'] - base['loop_s']:+.2f} s "
              f"in the training steps themselves ({mon['train_s'] / mon['steps'] * 1e3:.2f} vs "
              f"{base['loop_s'] / base['steps'] * 1e3:.2f} ms a step); 1-min load average base "
              f"{_load_text(base)}, monitor {_load_text(mon)}; loop CPU s base {base.get('loop_cpu_s', 0):.1f}, "
              f"monitor {mon.get('loop_cpu_s', 0):.1f}")
    figures = [_ab_figures(p) for p in entry["ab"] if not (_failed(p["base"]) or _failed(p["monitor"]))]
    if figures:
        slow = statistics.median(f[0] for f in figures)
        extra = statistics.median(f[1] for f in figures)
        ok = all(f[2] for f in figures)
        print(f"  A/B slowdown, median of {len(figures)} pair(s): {slow:+.2%} ({extra:+.2f} s); "
              f"target <= 1% + 2 s: {'PASS' if ok else 'FAIL'}{'' if ok else ' (in at least one pair)'}")
    clean = entry.get("clean")
    if clean is not None:
        if _failed(clean):
            print(f"  clean twin FAILED:\n{clean.get('error', '')}")
        else:
            final = clean.get("final") or {}
            ever = clean.get("first_leak")
            print(f"  clean twin (keeps float(loss)): {clean['steps']:,} steps, training {clean['train_s']:.2f} s, "
                  f"samples: {_runs_text(clean['stats'])}; final verdict {final.get('verdict')} "
                  f"(top 3 {final.get('top3')}); target not `leak`: "
                  f"{'PASS' if final.get('verdict') != 'leak' else 'FAIL'}"
                  + (f"; but a poll said `leak` at {ever['train_s_end']:.1f} s" if ever else
                     f"; no poll said `leak` ({len([p for p in clean['polls'] if not p.get('after_exit')])} polls)"))
            if final.get("verdict") == "leak":
                print(f"    clean twin's reason: {final.get('reason')!r}; first culprit's evidence: "
                      f"{final.get('evidence')!r}")
    sys.stdout.flush()


def print_heap_sample(result: dict) -> None:
    ratio = result["ratio"]
    print(f"== full heap sample vs plain census on a TensorFlow + Keras heap of {result['objects']:,} "
          f"tracked objects (median of {len(result['full_all'])} each, alternating)")
    print(f"  plain census (gc.collect + gc.get_objects + count by type): {result['plain_s'] * 1e3:.1f} ms")
    print(f"  full heap sample ({', '.join(HEAP_PROBES)}; one object list): {result['full_s'] * 1e3:.1f} ms")
    print(f"  ratio {ratio:.2f}x (target <= 1.5x) {'PASS' if ratio <= 1.5 else 'FAIL'}; ratio of means "
          f"{result['mean_ratio']:.2f}x")
    print(f"  each run, ms: plain {' '.join(f'{s * 1e3:.0f}' for s in result['plain_all'])} | full "
          f"{' '.join(f'{s * 1e3:.0f}' for s in result['full_all'])}")
    for title, parts in (("plain census", result["breakdown_plain"]), ("full heap sample", result["breakdown_full"])):
        print(f"  breakdown, {title} (medians of instrumented runs):")
        for name, seconds in parts.items():
            print(f"    {name:<44} {seconds * 1e3:8.1f} ms")
    runs, skips = result["numpy_runs"], result["numpy_skips"]
    if runs:
        print(f"    (tensors: numpy scan, holders + referents: {statistics.median(runs) * 1e3:.1f} ms when it runs; "
              f"it ran on {len(runs)} of {len(runs) + skips} instrumented walks, skipped on the others by "
              f"the probe's own schedule; the totals above include it where it ran)")
    else:
        print(f"    (tensors: numpy scan did not run on the {skips} instrumented walks)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=None, help="A/B pairs of the tf.function loop (16; --quick 8)")
    parser.add_argument("--block-steps", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="the 2 s and 30 s runs only, fewer A/B blocks")
    parser.add_argument("--long", action="store_true", help="also the 5 min and 30 min runs (about 2 h more)")
    parser.add_argument("--workdir", default=None,
                        help="where the training runs write (kept; default: a temp dir, removed at the end)")
    parser.add_argument("--child", metavar="SPEC", help=argparse.SUPPRESS)  # one training run (internal)
    args = parser.parse_args()
    if args.child:
        return child_main(args.child)
    if args.quick and args.long:
        parser.error("--quick and --long exclude each other")
    blocks = args.blocks if args.blocks is not None else (8 if args.quick else 16)
    began = time.perf_counter()
    summary = []  # (what, measured, target, verdict)

    print(f"== machine: {os.cpu_count()} cores, 1/5/15-min load average "
          f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())} at the start (shared: figures are noisy)")
    __import__("tensorflow")  # the TF allocator probe reads it

    print("== cheap probes: cost of one sample (median)")
    for name, micros in probe_costs().items():
        print(f"  {name:<10} {micros:8.1f} µs")

    per_million, count, total_ms = census_cost_per_million()
    verdict = "PASS" if per_million <= 100 else "FAIL"
    print("== object census (gc walk + count by type)")
    print(f"  {count:,} tracked objects: {total_ms:.1f} ms -> {per_million:.1f} ms per million "
          f"(target <= 100) {verdict}")
    summary.append(("census, gc walk + count, per million objects", f"{per_million:.1f} ms "
                    f"({count / 1e6:.2f} M: {total_ms:.0f} ms)", "<= 100 ms", verdict))

    result = ab_overhead(blocks, args.block_steps)
    steps = result["step_ms"]
    overhead = result["monitor_overhead"]
    print(f"== A/B on a tf.function training loop ({result['steps']} steps, "
          f"{blocks} alternating pairs of {args.block_steps}-step blocks, then tracemalloc blocks)")
    print(f"  step time, median: baseline {steps['baseline']:.3f} ms | monitor {steps['monitor']:.3f} ms | "
          f"tracemalloc {steps['tracemalloc']:.3f} ms")
    print(f"  monitor overhead: median of paired blocks {overhead:+.2%}, ratio of medians "
          f"{result['median_ratio_overhead']:+.2%} (target <= 1%) {'PASS' if overhead <= 0.01 else 'FAIL'}")
    print(f"  monitor's own accounting: {result['self_measured']['overhead']:.2%} of training time; "
          + ", ".join(f"{k}: {v['runs']} runs" for k, v in result["self_measured"]["units"].items()))
    print(f"  tracemalloc slowdown on the same loop: {result['tracemalloc_overhead']:+.1%}")
    own = result["self_measured"]["overhead"]
    if own > 0:
        print(f"  tracemalloc / monitor (own accounting): {result['tracemalloc_overhead'] / own:.0f}x")
    # How often the census runs at the default 1% budget on this heap.
    census_share = 0.45 * 0.01
    print(f"  at defaults the census ({total_ms / 1e3 * count / count:.3f} s on {count:,} objects) runs every "
          f"~{total_ms / 1e3 / census_share:.0f} s of training on a heap that size")
    summary.append((f"tf.function loop A/B ({steps['baseline']:.2f} ms steps), median paired",
                    f"{overhead:+.2%} (own {own:.2%}; tracemalloc {result['tracemalloc_overhead']:+.0%})",
                    "<= 1%", "PASS" if overhead <= 0.01 else "FAIL"))
    sys.stdout.flush()

    heap = heap_sample_vs_census(reps=5 if args.quick else 9)
    print_heap_sample(heap)
    summary.append((f"full heap sample vs plain census ({heap['objects'] / 1e6:.2f} M objects)",
                    f"{heap['full_s'] * 1e3:.0f} vs {heap['plain_s'] * 1e3:.0f} ms = {heap['ratio']:.2f}x",
                    "<= 1.5x", "PASS" if heap["ratio"] <= 1.5 else "FAIL"))
    summary.append(("  the same, ratio of means (numpy scan skipped on some walks)", f"{heap['mean_ratio']:.2f}x",
                    "<= 1.5x", "PASS" if heap["mean_ratio"] <= 1.5 else "FAIL"))
    sys.stdout.flush()

    lengths = [2.0, 30.0] + ([300.0, 1800.0] if args.long else [])
    pairs = {2.0: 1, 30.0: 1} if args.quick else {2.0: 2, 30.0: 1}
    pairs.update({300.0: 1, 1800.0: 1})
    workdir = args.workdir or tempfile.mkdtemp(prefix="tbleak-bench-runs-")
    print(f"== training runs in their own interpreters (run directories under {workdir})")
    if args.long:
        print(f"  (--long: a leaky run keeps 256 KiB tensors up to {LEAK_CAP_BYTES >> 30} GiB, then a 4-byte "
              f"tensor a step: still one EagerTensor a step)")
    runs = training_runs(lengths, pairs, workdir)
    print(f"  augmentation repetitions per step (calibrated once, by the first run, to ~{STEP_MS:g} ms a step): "
          f"{runs['reps']} (calibrated step {runs['calibrated_step_ms'] or float('nan'):.2f} ms)")
    for entry in runs["lengths"]:
        summary.extend(_length_rows(entry))

    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    print_summary(summary, time.perf_counter() - began)
    return 0


def print_summary(summary: list, wall_s: float) -> None:
    print(f"== summary (wall time of the whole benchmark: {wall_s:.0f} s)")
    header = ("what", "measured", "target")
    widths = [max([len(h)] + [len(row[i]) for row in summary]) for i, h in enumerate(header)]
    print("  " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " | verdict")
    print("  " + "-+-".join("-" * w for w in widths) + "-+--------")
    for row in summary:
        print("  " + " | ".join(cell.ljust(w) for cell, w in zip(row[:3], widths)) + " | " + row[3])


def _length_rows(entry: dict) -> list:
    label = entry["label"]
    rows = []
    run = entry["detection"]
    if _failed(run):
        return [(f"{label} polled run", "failed", "", "FAIL")]
    spent, train, ok = _own_ok(run)
    rows.append((f"{label}: steps, training s, samples per group",
                 f"{run['steps']:,} steps, {run['train_s']:.1f} s, {_runs_text(run['stats'])}", "", ""))
    rows.append((f"{label}: monitor time, own accounting (polled run)",
                 f"{spent:.2f} s = {spent / train:.2%}", "<= 1% + 2 s", "PASS" if ok else "FAIL"))
    figures = [_ab_figures(p) for p in entry["ab"] if not (_failed(p["base"]) or _failed(p["monitor"]))]
    if figures:
        owns = [p["monitor"]["stats"]["overhead"] for p in entry["ab"] if not _failed(p["monitor"])]
        rows.append((f"{label}: A/B slowdown, median of {len(figures)} pair(s)",
                     f"{statistics.median(f[0] for f in figures):+.2%} "
                     f"({statistics.median(f[1] for f in figures):+.2f} s; own {statistics.median(owns):.2%})",
                     "<= 1% + 2 s", "PASS" if all(f[2] for f in figures) else "FAIL"))
    detected = run.get("detected")
    rows.append((f"{label}: training s to `leak` with tensor culprit",
                 "never" if detected is None else f"{detected['train_s_end']:.1f} s"
                 + (" (final report)" if detected.get("after_exit") else ""),
                 "<= 15 s", "PASS" if detected is not None and detected["train_s_end"] <= 15 else "FAIL"))
    clean = entry.get("clean")
    if clean is not None:
        verdict = "failed" if _failed(clean) else (clean.get("final") or {}).get("verdict")
        rows.append((f"{label}: clean twin verdict", str(verdict), "not leak",
                     "PASS" if verdict not in ("leak", "failed") else "FAIL"))
    return rows


if __name__ == "__main__":
    sys.exit(main())
