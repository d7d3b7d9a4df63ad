"""How fast is the trace analysis, and how much memory does it take?

Records (once, then cached) a ~40 MB ``*.xplane.pb`` from a real TensorFlow
training loop: a small Keras MLP trained with a tf.function step for a few
thousand steps, every allocation traced (``TF_ENABLE_ONEDNN_OPTS=0
TF_CPU_ALLOCATOR_USE_BFC=1`` set before TensorFlow starts), step markers
from tb-leak's ProfilerWindow, and a leak (every step's logits kept).

Then times, in the same run, on the same file:

* ours: ``tb_leak_plugin.reporting.traces.analyze_trace_file`` (read + decode +
  analysis), median of ``--repeat`` runs;
* xprof's ``memory_profile`` tool: ``raw_to_tool_data.xspace_to_tool_data
  ([path], "memory_profile", {})`` (``pip install xprof``; skipped, with a
  note, when it does not import). It reports the peak and what is live at
  the peak, not leaks; it is the nearest peer that reads the same file;
* the case for the hand-written XSpace decoder: ours
  (``analysis.trace.decode`` + ``extract_memory_events``: every memory event
  with its stats, as arrays) against parsing the file with protobuf's upb
  runtime (``xplane.schema.XSpace.FromString``) and walking it in Python to
  the same rows (checked: same count, same time, address and byte sums);

and peak memory, measured in fresh subprocesses: ours (peak RSS growth
during the analysis, and tracemalloc's peak: Python objects and numpy), and
the upb parse + walk's peak RSS growth.

    python benchmarks/bench_traces.py [--trace PATH] [--steps 2000] [--repeat 3]

``--trace PATH``: analyse this file; if it does not exist, record into it.
Targets: ours >= 5x faster than xprof; peak memory <= 4x the file size.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from tb_leak_plugin.reporting import traces  # noqa: E402
from tb_leak_plugin.analysis import trace  # noqa: E402
from tb_leak_plugin.analysis.trace import format_bytes  # noqa: E402
from tb_leak_plugin.xplane import schema as xplane  # noqa: E402

SPEED_TARGET = 5.0
MEMORY_TARGET = 4.0

TRAIN = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {root!r})
    import tensorflow as tf
    from tb_leak_plugin.capture.profiling import ProfilerWindow

    logdir, steps = sys.argv[1], int(sys.argv[2])
    tf.random.set_seed(0)
    model = tf.keras.Sequential([
        tf.keras.Input((32,)),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    optimizer = tf.keras.optimizers.Adam(1e-3)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    x = tf.random.normal([64, 32])
    y = tf.random.uniform([64], 0, 10, dtype=tf.int32)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, logits

    kept = []
    window = ProfilerWindow(logdir, 1, 1 + steps)
    for step in range(steps + 3):
        loss, logits = train_step(x, y)
        kept.append(logits)  # the leak
        window.on_step_end(step)
    window.close()
    assert window.state == "done", window.error
    """
)

MEASURE = textwrap.dedent(
    """
    import json, resource, sys, tracemalloc
    sys.path.insert(0, {root!r})
    import numpy
    from tb_leak_plugin.reporting import traces
    from tb_leak_plugin.xplane import schema as xplane
    from tb_leak_plugin.analysis import trace

    def high_water_bytes():
        # VmHWM belongs to this process image (ru_maxrss can carry the
        # parent's peak across fork + exec).
        try:
            with open("/proc/self/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def current_bytes():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()

    # Peak RSS growth of the first analysis in this process: the file's
    # bytes, the protobuf runtime's buffers and numpy arrays, all included.
    base = max(current_bytes(), high_water_bytes())
    report = traces.analyze_trace_file({path!r})
    growth = high_water_bytes() - base
    tracemalloc.start()
    traces.analyze_trace_file({path!r})
    _, traced_peak = tracemalloc.get_traced_memory()
    print(json.dumps(dict(rss_growth=max(0, growth), tracemalloc_peak=traced_peak,
                          error=report.error)))
    """
)


MEASURE_UPB = textwrap.dedent(
    """
    import json, resource, sys
    sys.path.insert(0, {root!r})
    sys.path.insert(0, {benchmarks!r})
    import bench_traces

    def high_water_bytes():
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024

    def current_bytes():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()

    base = max(current_bytes(), high_water_bytes())
    with open({path!r}, "rb") as handle:
        rows = bench_traces.memory_rows_by_upb(handle.read())
    print(json.dumps(dict(rss_growth=max(0, high_water_bytes() - base), rows=rows["rows"])))
    """
)

# The stats of a memory event that the rows carry (what the analysis reads:
# a free is paired by address and allocator only).
ROW_STATS = {
    trace.MEMORY_ALLOCATION: {"addr", "allocation_bytes", "requested_bytes", "allocator_name",
                              "tf_op", "region_type", "shape", "data_type"},
    trace.MEMORY_DEALLOCATION: {"addr", "allocator_name"},
}


def memory_rows_by_decoder(data: bytes) -> dict:
    """Our way: the columnar decoder, then the memory events as arrays."""
    events = trace.extract_memory_events(trace.decode(data))
    return _summary(events.time_ps, events.address, events.bytes)


def memory_rows_by_upb(data: bytes) -> dict:
    """The plain way: parse the whole XSpace with upb, walk every event in
    Python, keep the memory events with their stats, then the same columns."""
    space = xplane.XSpace.FromString(data)
    stamps = [line.timestamp_ns for plane in space.planes for line in plane.lines]
    base_ns = min(stamps) if stamps else 0
    rows = []
    for plane in space.planes:
        stat_names = {sid: meta.name for sid, meta in plane.stat_metadata.items()}
        read = {mid: ROW_STATS[meta.name] for mid, meta in plane.event_metadata.items()
                if meta.name in ROW_STATS}
        for line in plane.lines:
            line_ps = (line.timestamp_ns - base_ns) * 1000
            for event in line.events:
                wanted = read.get(event.metadata_id)
                if wanted is None:
                    continue
                stats = {}
                for stat in event.stats:
                    name = stat_names.get(stat.metadata_id)
                    if name not in wanted:
                        continue
                    kind = stat.WhichOneof("value")
                    if kind == "ref_value":
                        stats[name] = stat_names.get(stat.ref_value, "")
                    elif kind is not None:
                        stats[name] = getattr(stat, kind)
                if "addr" in stats:  # as the analysis: no address, nothing to pair
                    rows.append((line_ps + event.offset_ps, stats))
    times = np.array([t for t, _ in rows], dtype=np.int64)
    address = np.array([int(s["addr"]) % (1 << 64) for _, s in rows], dtype=np.uint64).view(np.int64)
    size = np.array([int(s.get("allocation_bytes") or 0) or int(s.get("requested_bytes") or 0)
                     for _, s in rows], dtype=np.int64)
    return _summary(times, address, size)


def _summary(times, address, size) -> dict:
    """What both ways must agree on: how many rows, and sums of their columns."""
    return dict(rows=int(times.size), time_sum=int(times.sum()),
                address_sum=int(address.astype(np.uint64).sum()), bytes_sum=int(size.sum()))


def record_trace(path: str, steps: int) -> str:
    """Record the benchmark trace into ``path`` (a .xplane.pb file)."""
    workdir = tempfile.mkdtemp(prefix="tb_leak_bench_record_")
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0", TF_CPU_ALLOCATOR_USE_BFC="1",
               TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    print(f"recording {steps} training steps (full allocator coverage) ...", flush=True)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", TRAIN.format(root=ROOT), workdir, str(steps)],
        env=env, check=True, timeout=1800,
    )
    (recorded,) = glob.glob(os.path.join(workdir, "plugins", "profile", "*", "*.xplane.pb"))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    shutil.move(recorded, path)
    shutil.rmtree(workdir, ignore_errors=True)
    print(f"recorded in {time.perf_counter() - started:.1f} s", flush=True)
    return path


def median_seconds(function, repeat: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trace", help="trace file to analyse (recorded there if missing)")
    parser.add_argument("--steps", type=int, default=2000, help="training steps to record")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    path = args.trace or os.path.join(
        tempfile.gettempdir(), "tb_leak_bench_traces", f"train_{args.steps}_steps.xplane.pb"
    )
    if not os.path.exists(path):
        record_trace(path, args.steps)
    size = os.path.getsize(path)
    print(f"trace: {path} ({size} bytes, {format_bytes(size)})")

    report = traces.analyze_trace_file(path, max_bytes=max(size, traces.DEFAULT_MAX_TRACE_BYTES))
    if report.error:
        sys.exit(f"analysis failed: {report.error}")
    print(f"  steps {report.steps} ({report.step_source}), memory events {report.memory_events}, "
          f"allocators {report.allocators}")
    for op in report.suspicious[:3]:
        print(f"  suspicious: {op.op} ({op.region_type} {op.shape}): {op.reason}")

    try:
        from xprof.convert import raw_to_tool_data
    except Exception as error:  # optional, benchmark-only dependency
        print(f"xprof: not available ({type(error).__name__}: {error}); "
              "pip install xprof to compare. Ratio skipped.")
        raw_to_tool_data = None

    def run_ours():
        traces.analyze_trace_file(path)

    def run_xprof():
        raw_to_tool_data.xspace_to_tool_data([path], "memory_profile", {})

    # Interleaved, so that a busy machine slows both alike.
    ours_all, theirs_all = [], []
    for _ in range(args.repeat):
        ours_all.append(median_seconds(run_ours, 1)[0])
        if raw_to_tool_data is not None:
            theirs_all.append(median_seconds(run_xprof, 1)[0])
    ours = statistics.median(ours_all)
    print(f"ours:  median {ours:.3f} s  (runs: {', '.join(f'{t:.3f}' for t in ours_all)})")
    if theirs_all:
        theirs = statistics.median(theirs_all)
        ratio = theirs / ours
        print(f"xprof memory_profile: median {theirs:.3f} s  "
              f"(runs: {', '.join(f'{t:.3f}' for t in theirs_all)})")
        verdict = "meets" if ratio >= SPEED_TARGET else "MISSES"
        print(f"speed: ours is {ratio:.1f}x faster than xprof ({verdict} the >= "
              f"{SPEED_TARGET:.0f}x target)")

    bench_decoder(path, args.repeat)

    measured = subprocess.run(
        [sys.executable, "-c", MEASURE.format(root=ROOT, path=path)],
        capture_output=True, text=True, check=True, timeout=600,
    )
    memory = json.loads(measured.stdout.strip().splitlines()[-1])
    growth = memory["rss_growth"]
    traced = memory["tracemalloc_peak"]
    worst = max(growth, traced)
    verdict = "meets" if worst <= MEMORY_TARGET * size else "MISSES"
    print(f"memory: peak RSS growth {format_bytes(growth)} ({growth / size:.2f}x the file), "
          f"tracemalloc peak {format_bytes(traced)} ({traced / size:.2f}x); "
          f"{verdict} the <= {MEMORY_TARGET:.0f}x target")
    measured = subprocess.run(
        [sys.executable, "-c", MEASURE_UPB.format(root=ROOT, benchmarks=os.path.dirname(
            os.path.abspath(__file__)), path=path)],
        capture_output=True, text=True, check=True, timeout=600,
    )
    upb = json.loads(measured.stdout.strip().splitlines()[-1])
    print(f"memory of upb parse + walk: peak RSS growth {format_bytes(upb['rss_growth'])} "
          f"({upb['rss_growth'] / size:.2f}x the file)")


def bench_decoder(path: str, repeat: int) -> None:
    """Our decoder against upb + a Python walk, to the same memory-event rows."""
    with open(path, "rb") as handle:
        data = handle.read()
    ours_rows, upb_rows = memory_rows_by_decoder(data), memory_rows_by_upb(data)
    if ours_rows != upb_rows:
        sys.exit(f"decoder and upb disagree: {ours_rows} vs {upb_rows}")
    ours_all, upb_all = [], []
    for _ in range(repeat):  # interleaved
        ours_all.append(median_seconds(lambda: memory_rows_by_decoder(data), 1)[0])
        upb_all.append(median_seconds(lambda: memory_rows_by_upb(data), 1)[0])
    ours, upb = statistics.median(ours_all), statistics.median(upb_all)
    print(f"memory events with their stats ({ours_rows['rows']} rows, same in both):")
    print(f"  ours (columnar decoder):       median {ours:.3f} s  "
          f"(runs: {', '.join(f'{t:.3f}' for t in ours_all)})")
    print(f"  upb XSpace.FromString + walk:  median {upb:.3f} s  "
          f"(runs: {', '.join(f'{t:.3f}' for t in upb_all)})  {upb / ours:.1f}x ours")


if __name__ == "__main__":
    main()
