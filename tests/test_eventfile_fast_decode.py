"""The template decoder of event records against plain protobuf parsing.

Random runs (several tag sets, so several record layouts; odd float32 values;
steps up to 2**62, repeated and out of order; tb-leak records interleaved with
other events; several files, a restart among them) are read three ways:
``reader.load_run`` as it is, ``load_run`` with the template decoder switched
off (every record through protobuf), and, for one-file runs, an independent
walk over ``Event.FromString`` of every record. All must agree to the bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2

from tb_leak_plugin.eventfile import reader
from tb_leak_plugin.metadata import SeriesInfo
from tb_leak_plugin.summary import EventWriter

POOL = [
    SeriesInfo("process", "rss_bytes", "bytes"),
    SeriesInfo("tf", "bytes_in_use", "bytes", "GPU:0"),
    SeriesInfo("objects", "live_count", "count", "builtins.dict"),
    SeriesInfo("objects", "live_count", "count", "pkg.Ünïcode_" + "x" * 150),  # a long tag
    SeriesInfo("gc", "tracked_objects", "count"),
    SeriesInfo("tensors", "eager_count", "count"),
]
ODD_VALUES = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 3.4e38, -3.4e38,
              1.4e-45, 1.2e-38, -1.0e-40, 1.0, 16777217.0, 123456789.0]
MAX_STEP = 2**62


def _random_value(rng) -> float:
    if rng.random() < 0.3:
        return ODD_VALUES[rng.integers(len(ODD_VALUES))]
    return float(rng.normal() * 10.0 ** rng.uniform(-30, 30))


def _random_step(rng, previous: int) -> int:
    roll = rng.random()
    if roll < 0.1:
        return previous  # a repeated step
    if roll < 0.15:
        return int(rng.integers(0, previous + 1))  # back in time
    if roll < 0.2:
        return int(rng.integers(previous, MAX_STEP))  # a huge jump
    return min(MAX_STEP, previous + int(rng.integers(1, 3)))


def _foreign_event(rng, step: int) -> event_pb2.Event:
    """Something another writer put in the same file."""
    kind = rng.integers(3)
    event = event_pb2.Event(step=step, wall_time=1.7e9 + step % 1000)
    if kind == 0:
        event.summary.value.add(tag="loss", simple_value=float(rng.normal()))
    elif kind == 1:
        value = event.summary.value.add(tag="other/plugin")
        value.metadata.plugin_data.plugin_name = "scalars"
        value.tensor.dtype = 1
        value.tensor.float_val.append(1.5)
    else:
        event.file_version = "brain.Event:2"
    return event


def write_random_run(run_dir: str, rng, files: int = 1, records: int = 400) -> None:
    tag_sets = [list(rng.choice(len(POOL), size=rng.integers(1, len(POOL) + 1), replace=False))
                for _ in range(3)]
    step = 0
    for _ in range(files):
        writer = EventWriter(run_dir, flush_secs=1e9)
        if files > 1:
            step = int(rng.integers(0, step + 1))  # a restart from a checkpoint
        for _ in range(records):
            step = _random_step(rng, step)
            if rng.random() < 0.15:
                writer.record_writer.add_event(_foreign_event(rng, step))
            chosen = tag_sets[rng.integers(len(tag_sets))]
            sample = [(POOL[k], _random_value(rng)) for k in chosen]
            writer.write(step, sample, wall_time=float(1.7e9 + rng.uniform(0, 1e6)))
        writer.close()


def protobuf_points(run_dir: str) -> dict:
    """tag -> (steps, wall_times, values) by plain protobuf parsing of every record:
    tb-leak series only, sorted by step, the last write of a step winning."""
    warnings: list[str] = []
    points: dict[str, list] = {}
    rejected: set[str] = set()
    for path in reader.event_files(run_dir, warnings):
        for record in reader.iter_records(path, warnings):
            event = event_pb2.Event.FromString(record)
            for value in event.summary.value:
                if value.tag in rejected:
                    continue
                if value.tag not in points:
                    if value.metadata.plugin_data.plugin_name != "leak":
                        rejected.add(value.tag)
                        continue
                    points[value.tag] = []
                points[value.tag].append((event.step, event.wall_time, value.tensor.float_val[0]))
    assert not warnings
    out = {}
    for tag, rows in points.items():
        by_step = {}
        for step, wall_time, number in rows:
            by_step[step] = (wall_time, number)  # the last write wins
        steps = sorted(by_step)
        out[tag] = (np.array(steps, dtype=np.int64),
                    np.array([by_step[s][0] for s in steps], dtype=np.float64),
                    np.array([by_step[s][1] for s in steps], dtype=np.float64))
    return out


def loaded_points(run_dir: str) -> dict:
    run = reader.load_run("run", run_dir)
    assert run.warnings == []
    return {tag: (s.steps, s.wall_times, s.values) for tag, s in run.series.items()}


def assert_same_bits(got: dict, expected: dict) -> None:
    assert sorted(got) == sorted(expected)
    for tag in expected:
        for name, a, b in zip(("steps", "wall_times", "values"), got[tag], expected[tag]):
            a, b = np.asarray(a), np.asarray(b)
            assert a.shape == b.shape, (tag, name)
            assert np.array_equal(a.view(np.uint64) if a.dtype == np.float64 else a,
                                  b.view(np.uint64) if b.dtype == np.float64 else b), (tag, name)


def without_template_decoder(monkeypatch):
    def every_record_leftover(buffer, offsets, lengths, min_group=8):
        return [], np.arange(len(offsets), dtype=np.int64)

    monkeypatch.setattr(reader.fast_events, "decode_chunk", every_record_leftover)


@pytest.mark.parametrize("seed", range(6))
def test_template_decoder_equals_protobuf_parsing(tmp_path, seed, monkeypatch):
    rng = np.random.default_rng(seed)
    run_dir = str(tmp_path / "run")
    write_random_run(run_dir, rng)
    fast = loaded_points(run_dir)
    assert fast, "the run has tb-leak series"
    assert_same_bits(fast, protobuf_points(run_dir))
    without_template_decoder(monkeypatch)
    assert_same_bits(loaded_points(run_dir), fast)


@pytest.mark.parametrize("seed", range(3))
def test_template_decoder_equals_protobuf_over_files_and_restarts(tmp_path, seed, monkeypatch):
    rng = np.random.default_rng(100 + seed)
    run_dir = str(tmp_path / "run")
    write_random_run(run_dir, rng, files=3, records=200)
    fast = loaded_points(run_dir)
    without_template_decoder(monkeypatch)
    assert_same_bits(loaded_points(run_dir), fast)


def test_odd_values_and_extreme_steps_survive(tmp_path):
    """The random runs above hold these; here each one is checked by name."""
    info = POOL[0]
    run_dir = str(tmp_path / "run")
    writer = EventWriter(run_dir)
    steps = [0, 1, 2**31, 2**32 + 5, 2**62 - 1, 2**62] + list(range(10, 10 + len(ODD_VALUES)))
    values = [1.0] * 6 + ODD_VALUES
    for step, value in zip(steps, values):
        writer.write(step, [(info, value)], wall_time=1.7e9)
    writer.write(2**62, [(info, 7.0)], wall_time=1.7e9)  # repeated: the last write wins
    writer.close()
    series = reader.load_run("run", run_dir).series[info.tag]
    expected = dict(zip(steps, np.float32(values).astype(np.float64).tolist()))
    expected[2**62] = 7.0
    assert series.steps.tolist() == sorted(expected)
    got = dict(zip(series.steps.tolist(), series.values.tolist()))
    for step, value in expected.items():
        assert np.float64(got[step]).view(np.uint64) == np.float64(value).view(np.uint64), step
