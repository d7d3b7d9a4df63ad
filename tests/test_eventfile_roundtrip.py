"""Event files written by tb-leak's TF-free EventWriter, read back: with
TensorBoard's own reader and with tb-leak's loader, through truncation,
corruption, garbage, repeated steps, foreign series, symlink loops and failed
writes.
"""

import os

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.compat.proto import event_pb2, summary_pb2

from tb_leak_plugin import metadata, summary
from tb_leak_plugin.eventfile import reader as loading
from tb_leak_plugin.metadata import SeriesInfo

RSS = SeriesInfo("process", "rss_bytes", "bytes")
DICTS = SeriesInfo("objects", "live_count", "count", "builtins.dict")


def _write(logdir, steps, infos=(RSS, DICTS)):
    writer = summary.EventWriter(logdir)
    for step in steps:
        writer.write(step, [(info, float(step * 10 + k)) for k, info in enumerate(infos)], wall_time=1000.0 + step)
    writer.close()
    return [os.path.join(logdir, n) for n in os.listdir(logdir)]


def test_event_writer_output_reads_back_with_tensorboard_and_tb_leak(tmp_path):
    (path,) = _write(str(tmp_path / "run"), range(50))
    events = list(event_file_loader.EventFileLoader(path).Load())
    values = [(e.step, v.tag, v.tensor.float_val[0]) for e in events for v in e.summary.value]
    assert values[:2] == [(0, RSS.tag, 0.0), (0, DICTS.tag, 1.0)]
    # Metadata only on the first point of each tag.
    with_meta = [v.tag for e in events for v in e.summary.value if v.HasField("metadata")]
    assert sorted(with_meta) == sorted([RSS.tag, DICTS.tag])
    run = loading.load_run("run", str(tmp_path / "run"))
    series = run.series[RSS.tag]
    assert series.info == RSS
    assert list(series.steps) == list(range(50))
    assert np.allclose(series.values, np.arange(50) * 10)
    assert np.allclose(series.wall_times, 1000.0 + np.arange(50))
    assert run.warnings == []


def test_discovers_nested_runs_and_groups_workers(tmp_path):
    for name in ("job/worker-0", "job/worker-1", "solo"):
        _write(str(tmp_path / name), range(3))
    data = loading.load_logdir(str(tmp_path))
    assert [r.name for r in data.runs] == ["job/worker-0", "job/worker-1", "solo"]
    assert loading.group_runs(data.runs) == {"job": ["job/worker-0", "job/worker-1"]}
    assert [r.name for r in loading.load_logdir(str(tmp_path), run_filter="worker-1").runs] == ["job/worker-1"]


def test_truncated_last_record_is_not_an_error(tmp_path):
    (path,) = _write(str(tmp_path / "run"), range(20))
    size = os.path.getsize(path)
    with open(path, "r+b") as handle:
        handle.truncate(size - 7)  # a writer caught mid-record
    run = loading.load_run("run", str(tmp_path / "run"))
    assert list(run.series[RSS.tag].steps) == list(range(19))
    assert run.warnings == []


def test_corrupt_record_keeps_earlier_points_and_warns(tmp_path):
    (path,) = _write(str(tmp_path / "run"), range(20))
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    run = loading.load_run("run", str(tmp_path / "run"))
    kept = run.series[RSS.tag].steps
    assert 5 <= len(kept) < 20 and list(kept) == list(range(len(kept)))
    assert len(run.warnings) == 1 and "corrupt record" in run.warnings[0] and path in run.warnings[0]


def test_garbage_and_empty_event_files(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "events.out.tfevents.1.garbage").write_bytes(os.urandom(4096))
    (run_dir / "events.out.tfevents.2.empty").write_bytes(b"")
    _write(str(run_dir), range(5))
    run = loading.load_run("run", str(run_dir))
    assert len(run.series[RSS.tag]) == 5
    assert any("garbage" in w for w in run.warnings)


def test_non_finite_values_and_repeated_steps(tmp_path):
    writer = summary.EventWriter(str(tmp_path / "run"))
    for step, value in [(0, 1.0), (1, float("nan")), (2, float("inf")), (1, 5.0), (3, 2.0)]:
        writer.write(step, [(RSS, value)])
    writer.close()
    series = loading.load_run("run", str(tmp_path / "run")).series[RSS.tag]
    # Sorted by step; the last write of a repeated step (a restarted job) wins.
    assert list(series.steps) == [0, 1, 2, 3]
    assert series.values[1] == 5.0 and np.isinf(series.values[2])


def test_foreign_and_newer_series_are_skipped_with_warning(tmp_path):
    run_dir = str(tmp_path / "run")
    writer = summary.EventWriter(run_dir)
    newer = summary_pb2.Summary()
    value = newer.value.add(tag="leak/future/x", tensor=summary._scalar_tensor(1.0))
    value.metadata.plugin_data.plugin_name = "leak"
    value.metadata.plugin_data.content = metadata.LeakPluginData(
        version=99, group="g", measure="m", unit="bytes").SerializeToString()
    foreign = newer.value.add(tag="loss", simple_value=0.5)
    del foreign
    writer._writer.add_event(event_pb2.Event(step=0, summary=newer))
    writer.write(0, [(RSS, 1.0)])
    writer.close()
    run = loading.load_run("run", run_dir)
    assert list(run.series) == [RSS.tag]
    assert any("newer tb-leak" in w for w in run.warnings)


def test_missing_and_non_directory_logdirs(tmp_path):
    with pytest.raises(loading.LogdirError, match="does not exist"):
        loading.load_logdir(str(tmp_path / "nope"))
    file_path = tmp_path / "file"
    file_path.write_text("x")
    with pytest.raises(loading.LogdirError, match="not a directory"):
        loading.load_logdir(str(file_path))
    assert loading.load_logdir(str(tmp_path)).runs == []


def test_malformed_tensor_content_is_skipped_not_fatal(tmp_path):
    from tensorboard.compat.proto import tensor_pb2, types_pb2

    run_dir = str(tmp_path / "run")
    writer = summary.EventWriter(run_dir)
    writer.write(0, [(RSS, 1.0)])
    bad = summary_pb2.Summary()
    bad.value.add(tag=RSS.tag, tensor=tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_content=b"abc"))
    writer._writer.add_event(event_pb2.Event(step=1, summary=bad))
    writer.write(2, [(RSS, 3.0)])
    writer.close()
    series = loading.load_run("run", run_dir).series[RSS.tag]
    assert list(series.steps) == [0, 2]


def test_symlink_loops_in_a_logdir_neither_repeat_runs_nor_hang(tmp_path):
    _write(str(tmp_path / "run"), range(3))
    os.symlink(str(tmp_path), str(tmp_path / "a"))
    os.symlink(str(tmp_path), str(tmp_path / "b"))
    assert list(loading.discover_runs(str(tmp_path))) == ["run"]


def test_failed_write_loses_nothing_and_leaves_no_torn_record(tmp_path, monkeypatch):
    from tb_leak_plugin.eventfile import writer as event_writer

    writer = summary.EventWriter(str(tmp_path / "run"), flush_secs=1e9)
    writer.write(0, [(RSS, 1.0)])
    writer.flush()
    real_write = os.write

    def disk_full(fd, data):
        real_write(fd, bytes(data[: len(data) // 2]))  # half a record lands, then the disk is full
        raise OSError(28, "No space left on device")

    writer.write(1, [(RSS, 2.0)])
    monkeypatch.setattr(event_writer.os, "write", disk_full)
    with pytest.raises(OSError):
        writer.flush()
    monkeypatch.setattr(event_writer.os, "write", real_write)
    writer.write(2, [(RSS, 3.0)])
    writer.close()
    run = loading.load_run("run", str(tmp_path / "run"))
    assert list(run.series[RSS.tag].steps) == [0, 1, 2]
    assert run.warnings == []


@pytest.mark.parametrize("where", ["payload", "length_crc", "length"])
def test_damage_inside_a_run_of_same_length_records_is_found_at_its_record(tmp_path, where):
    """Records of one length are framed as a strided run; damage to one of
    them still ends the file at that record, with the same warning and byte
    as the record-by-record reading gives."""
    (path,) = _write(str(tmp_path / "run"), range(100, 1100))
    with open(path, "rb") as handle:
        data = bytearray(handle.read())
    offsets, pos = [], 0
    while pos < len(data):  # the frames, read plainly
        offsets.append(pos)
        pos += 16 + int.from_bytes(data[pos:pos + 8], "little")
    damaged = offsets[600]
    byte = {"payload": damaged + 12 + 3, "length_crc": damaged + 9, "length": damaged + 1}[where]
    data[byte] ^= 0x40
    with open(path, "wb") as handle:
        handle.write(bytes(data))
    run = loading.load_run("run", str(tmp_path / "run"))
    steps = run.series[RSS.tag].steps
    assert steps[-1] == 100 + 600 - 1 - (len(offsets) - 1000) and steps.size == steps[-1] - 99
    assert any(f"at byte {damaged}" in warning for warning in run.warnings), run.warnings
