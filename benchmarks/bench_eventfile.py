"""Does the hand-written event decoder pay for itself?

    python benchmarks/bench_eventfile.py [--series 10] [--points 100000] [--repeat 3]

Writes (once, cached under the temp dir) one run of SERIES series x POINTS
points with tb-leak's own writer (one event per step holding every series,
as the Monitor writes), then reads every point back three ways, interleaved
in the same run so that a busy machine slows all alike:

* ours: ``tb_leak_plugin.eventfile.reader.load_run`` (records of one layout
  decoded together by template, ``eventfile.fast_decode``; the rest, such
  as each tag's first point with its metadata, parsed with protobuf);
* per-record protobuf: the same framing and CRC checks
  (``reader.iter_records``), then ``event_pb2.Event.FromString`` on every
  record and a Python walk to the same (tag, step, wall time, value) points;
* TensorBoard's own reader: ``EventFileLoader`` (its framing, CRC checks and
  parsing; what ``tensorboard --load_fast=false`` reads with, through
  TensorFlow's record reader when TensorFlow is installed), then the same
  walk; and ``RawEventFileLoader`` + ``Event.FromString``.

All three must give the same points (checked), then their medians and the
ratios to ours are printed.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorBoard's reader may load TensorFlow

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tensorboard.backend.event_processing import event_file_loader  # noqa: E402
from tensorboard.compat.proto import event_pb2  # noqa: E402

from tb_leak_plugin.eventfile import reader  # noqa: E402
from tb_leak_plugin.metadata import SeriesInfo  # noqa: E402
from tb_leak_plugin.summary import EventWriter  # noqa: E402
from tb_leak_plugin.units import format_bytes  # noqa: E402


def make_run(path: str, series: int, points: int) -> None:
    """One run of ``series`` x ``points``, written as the Monitor writes."""
    rng = np.random.default_rng(0)
    infos = [SeriesInfo("process", "rss_bytes", "bytes"), SeriesInfo("python", "allocated_blocks", "blocks")]
    infos += [SeriesInfo("objects", "live_count", "count", f"pkg.Type{k}") for k in range(series)]
    infos = infos[:series]
    values = 1e6 + np.cumsum(rng.normal(100, 1000, size=(points, series)), axis=0)
    tmp = path + ".partial"
    writer = EventWriter(tmp, flush_secs=1e9)
    for step in range(points):
        writer.write(step, list(zip(infos, values[step].tolist())), wall_time=1.7e9 + step * 0.05)
        if step % 1000 == 999:
            writer.flush()  # the writer's backlog is bounded: flush as the Monitor does
    writer.close()
    os.replace(tmp, path)


# -- the three readers, each to {tag: (steps, wall_times, values)} ------------------------------


def read_ours(run_dir: str) -> dict:
    run = reader.load_run("run", run_dir)
    return {tag: (s.steps, s.wall_times, s.values) for tag, s in run.series.items()}


def _points_of(events) -> dict:
    """A Python walk from events to the same points: tb-leak series only (the
    plugin name on each tag's first value), the last write of a step winning."""
    points: dict[str, tuple[list, list, list]] = {}
    ours: dict[str, bool] = {}
    for event in events:
        if not event.HasField("summary"):
            continue
        for value in event.summary.value:
            tag = value.tag
            mine = ours.get(tag)
            if mine is None:
                mine = ours[tag] = value.metadata.plugin_data.plugin_name == "leak"
                if mine:
                    points[tag] = ([], [], [])
            if not mine:
                continue
            number = reader.scalar_value(value)
            if number is None:
                continue
            steps, wall_times, values = points[tag]
            steps.append(event.step)
            wall_times.append(event.wall_time)
            values.append(number)
    return {tag: _sorted_columns(*columns) for tag, columns in points.items()}


def _sorted_columns(steps, wall_times, values):
    steps = np.asarray(steps, dtype=np.int64)
    order = np.argsort(steps, kind="stable")
    return (steps[order], np.asarray(wall_times, dtype=np.float64)[order],
            np.asarray(values, dtype=np.float64)[order])


def read_protobuf(run_dir: str) -> dict:
    parse = event_pb2.Event.FromString
    warnings: list[str] = []
    events = (parse(record) for path in reader.event_files(run_dir, warnings)
              for record in reader.iter_records(path, warnings))
    return _points_of(events)


def read_tensorboard(run_dir: str) -> dict:
    events = (event for path in sorted(glob.glob(os.path.join(run_dir, "*tfevents*")))
              for event in event_file_loader.EventFileLoader(path).Load())
    return _points_of(events)


def read_tensorboard_raw(run_dir: str) -> dict:
    parse = event_pb2.Event.FromString
    events = (parse(record) for path in sorted(glob.glob(os.path.join(run_dir, "*tfevents*")))
              for record in event_file_loader.RawEventFileLoader(path).Load())
    return _points_of(events)


READERS = {
    "ours (eventfile.reader, template decoder)": read_ours,
    "per-record protobuf (Event.FromString)": read_protobuf,
    "TensorBoard EventFileLoader": read_tensorboard,
    "TensorBoard RawEventFileLoader + FromString": read_tensorboard_raw,
}


def same_points(a: dict, b: dict) -> bool:
    if sorted(a) != sorted(b):
        return False
    return all(np.array_equal(x, y) for tag in a for x, y in zip(a[tag], b[tag]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--series", type=int, default=10)
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    run_dir = os.path.join(tempfile.gettempdir(), "tb_leak_bench_eventfile",
                           f"run_{args.series}x{args.points}")
    if not os.path.isdir(run_dir):
        print(f"writing {args.series} series x {args.points} points ...", flush=True)
        make_run(run_dir, args.series, args.points)
    size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(run_dir, "*")))
    if args.points > 2 * reader.MAX_POINTS_PER_SERIES:
        # Compared point for point with the other readers: every point kept
        # (at its default the reader keeps 1 point in 2, 4, ... past its bound).
        print(f"reader bound lifted from {2 * reader.MAX_POINTS_PER_SERIES:,} to {args.points:,} points a series")
        reader.MAX_POINTS_PER_SERIES = args.points
    reference = read_ours(run_dir)
    points = sum(steps.size for steps, _, _ in reference.values())
    print(f"run: {run_dir} ({format_bytes(size)}, {len(reference)} series, {points:,} points)")
    if points != args.series * args.points:
        print(f"expected {args.series * args.points:,} points: delete {run_dir} and rerun")
        return 1

    for name, read in READERS.items():
        if not same_points(read(run_dir), reference):
            print(f"{name}: DIFFERENT points from ours")
            return 1
    print("all readers give the same points")

    times = {name: [] for name in READERS}
    for _ in range(args.repeat):  # interleaved: a busy machine slows all alike
        for name, read in READERS.items():
            started = time.perf_counter()
            read(run_dir)
            times[name].append(time.perf_counter() - started)
    ours = statistics.median(times[next(iter(READERS))])
    for name, measured in times.items():
        median = statistics.median(measured)
        ratio = "" if median == ours else f"  {median / ours:5.1f}x ours"
        print(f"{name:46s} median {median:7.3f} s ({points / median / 1e6:5.2f} M points/s){ratio}"
              f"   runs: {', '.join(f'{t:.3f}' for t in measured)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
