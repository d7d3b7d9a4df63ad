"""The monitor under hostile conditions: threads, a full disk, a deleted
logdir, forks, read-only logdirs, classes that break hashing, and
``summary.memory`` inside a ``tf.function``. The training loop must never see
an exception, memory must stay bounded, and no point may be written twice.
"""

import gc
import logging
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest

import tb_leak_plugin as tbleak
from tb_leak_plugin.capture import probes
from tb_leak_plugin.eventfile import reader

DENSE = {"overhead_budget": None}


def _points(logdir, tag="leak/process/rss_bytes"):
    data = reader.load_logdir(str(logdir))
    out = {}
    for run in data.runs:
        series = run.series.get(tag)
        out[run.name] = [] if series is None else [int(s) for s in series.steps]
    return out


class _PeakRSS:
    """Samples this process's RSS in a thread; ``peak`` minus ``start`` is the growth."""

    def __init__(self):
        self.process = psutil.Process()
        self.start = self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


@pytest.mark.parametrize("shared", [True, False], ids=["one-monitor", "two-monitors"])
def test_sampling_from_two_threads_stays_bounded(tmp_path, shared):
    kept = [np.ones(256) for _ in range(2000)]  # arrays for the numpy scan to find
    monitors = [tbleak.Monitor(str(tmp_path / "a"), **DENSE)]
    monitors.append(monitors[0] if shared else tbleak.Monitor(str(tmp_path / "b"), **DENSE))
    errors = []

    def loop(monitor):
        try:
            # Eight dense samples a thread: each walks the whole heap (a full
            # test run's: a second or so), so the two threads' walks overlap
            # many times over; forty took 87 s of a CI run, sixteen 35 s.
            for step in range(8):
                kept.append(np.ones(8))
                monitor.sample(step)
        except Exception as error:  # sample() must never raise
            errors.append(error)

    with _PeakRSS() as rss:
        threads = [threading.Thread(target=loop, args=(m,)) for m in monitors]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    for monitor in set(monitors):
        monitor.close()
    assert errors == []
    # One census's object list must never be scanned by another's: that was
    # gigabytes. A few tens of MiB of working memory is the norm.
    assert rss.peak - rss.start < 200 << 20, (rss.peak - rss.start) / 2**20
    counts = _points(tmp_path, "leak/tensors/numpy_count")
    assert all(counts.values()), counts


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(mount)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {result.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_full_disk_bounds_the_backlog_and_keeps_what_fits(small_disk, caplog):
    filler = small_disk / "filler"
    logdir = small_disk / "run"
    monitor = tbleak.Monitor(str(logdir), flush_secs=0, probes=["process", "python", "gc"], **DENSE)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)  # fill the disk
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    with caplog.at_level(logging.WARNING, logger="tb_leak_plugin"):
        for step in range(600):
            monitor.sample(step)  # must not raise
        record_writer = monitor._writer.record_writer
        # Repeated failed flushes stop the monitor (said once), and the backlog
        # stays bounded.
        assert record_writer._pending.nbytes <= 4 << 20
        assert any("stops sampling" in r.getMessage() for r in caplog.records)
        assert sum("stops sampling" in r.getMessage() for r in caplog.records) == 1
        stopped_at = monitor._step
        os.remove(filler)  # space comes back
        monitor.close()
    steps = _points(small_disk)["run"]
    # Every point taken before the stop is written once space returned, in
    # order, none twice.
    assert steps == sorted(set(steps))
    assert len(steps) >= 3 and steps[-1] <= stopped_at


def test_pending_records_are_written_before_they_pile_up(tmp_path):
    from tb_leak_plugin.eventfile import writer as event_writer
    from tensorboard.compat.proto import event_pb2

    writer = event_writer.RecordEventWriter(str(tmp_path / "run"), flush_secs=1e9)
    most = 0
    for step in range(2000):  # ~2 MiB of records, no timed flush in sight
        writer.add_event(event_pb2.Event(step=step, file_version="x" * 1000))
        most = max(most, writer._pending.nbytes)
    # The buffer is memory of the process being measured: it stays small.
    assert most < event_writer.FLUSH_PENDING_BYTES + 1100
    assert os.path.getsize(writer.path) > 1900 * 1000
    writer.close()
    assert len(list(reader.iter_records(writer.path, []))) == 2001


def test_pending_records_hold_no_object_of_their_own(tmp_path):
    """Records waiting for a flush are the monitor's memory in the process it
    measures: kept as one ``bytes`` object each, they raised Python's
    allocated blocks by one a sample until each flush, a sawtooth in the
    program's own ``allocated_blocks`` series. In the buffers allocated once,
    a steady stream of records leaves the block count where it was."""
    import sys
    from tb_leak_plugin.eventfile import writer as event_writer
    from tensorboard.compat.proto import event_pb2

    writer = event_writer.RecordEventWriter(str(tmp_path / "run"), flush_secs=1e9)
    payloads = [event_pb2.Event(step=step, file_version="v" * 200).SerializeToString() for step in range(3000)]
    for payload in payloads[:500]:  # warm up: the writer's buffers, the interpreter's free lists
        writer.add_event(event_pb2.Event.FromString(payload))
    grown = []
    for payload in payloads[500:]:
        event = event_pb2.Event.FromString(payload)
        before = sys.getallocatedblocks()
        writer.add_event(event)
        grown.append(sys.getallocatedblocks() - before)
    # Between two flushes (16 KiB: ~70 of these records) a list would have
    # grown by a block a record.
    assert max(abs(sum(grown[i:i + 60])) for i in range(0, len(grown) - 60, 60)) <= 3
    writer.close()
    records = list(reader.iter_records(writer.path, []))
    assert len(records) == 3001 and records[1:] == payloads


def test_pending_records_written_in_part_keep_the_rest_in_order():
    from tb_leak_plugin.eventfile.writer import PendingRecords

    pending = PendingRecords(64)
    records = [bytes([i]) * (i % 7 + 1) for i in range(40)]  # past the first capacity: it grows
    for record in records:
        pending.append(record)
    assert len(pending) == 40 and pending.nbytes == sum(map(len, records))
    sent = sum(map(len, records[:5])) + 2  # five whole records and part of the sixth
    done, whole = pending.whole(sent)
    assert (done, whole) == (5, sum(map(len, records[:5])))
    pending.drop(done)
    with pending.view() as view:
        assert bytes(view) == b"".join(records[5:])
    pending.append(b"tail")
    with pending.view() as view:
        assert bytes(view) == b"".join(records[5:]) + b"tail"
    assert pending.whole(0) == (0, 0)
    assert pending.whole(0, at_least_one=True) == (1, len(records[5]))  # a record past a segment still goes
    pending.drop(len(pending))
    assert len(pending) == 0 and pending.nbytes == 0 and not pending


def test_partial_flush_writes_whole_records_and_keeps_the_rest(small_disk, monkeypatch):
    from tb_leak_plugin.eventfile import writer as event_writer
    from tb_leak_plugin.eventfile.writer import RecordEventWriter
    from tensorboard.compat.proto import event_pb2

    monkeypatch.setattr(event_writer, "FLUSH_PENDING_BYTES", 1 << 30)  # one flush, below
    writer = RecordEventWriter(str(small_disk / "run"), flush_secs=1e9)
    payload = "x" * 900
    for step in range(400):  # ~370 KiB: about half fits
        writer.add_event(event_pb2.Event(step=step, file_version=payload))
    with pytest.raises(OSError):
        writer.flush()
    kept = len(writer._pending)
    assert 0 < kept < 400
    size = os.path.getsize(writer.path)
    # The file holds only whole records: the reader sees every one of them.
    events = list(reader.iter_records(writer.path, []))
    assert size == writer._written and len(events) == 400 - kept + 1  # + the file-version record
    writer._pending.clear()
    writer.close()


def test_deleted_logdir_is_noticed_and_a_new_file_started(tmp_path, caplog):
    logdir = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="tb_leak_plugin"):
        with tbleak.Monitor(str(logdir), flush_secs=0, probes=["process"], **DENSE) as monitor:
            for step in range(10):
                monitor.sample(step)
            shutil.rmtree(logdir)
            for step in range(10, 20):
                monitor.sample(step)
    steps = _points(tmp_path)["run"]
    assert steps and min(steps) >= 10 and max(steps) == 19
    assert any("was deleted" in r.getMessage() for r in caplog.records)


def test_forked_child_never_writes_into_the_parents_file(tmp_path):
    logdir = tmp_path / "run"
    monitor = tbleak.Monitor(str(logdir), flush_secs=1e9, probes=["process"], **DENSE)
    for step in range(5):
        monitor.sample(step)  # pending, not yet flushed
    pid = os.fork()
    if pid == 0:  # the child: samples, closes, exits without running the parent's cleanup
        try:
            for step in range(5, 10):
                monitor.sample(step)
            monitor.close()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    for step in range(5, 8):
        monitor.sample(step)
    monitor.close()
    steps = _points(tmp_path)["run"]
    assert steps == list(range(8))  # each once, the parent's only


def test_unwritable_logdir_never_raises(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with caplog.at_level(logging.WARNING, logger="tb_leak_plugin"):
        monitor = tbleak.Monitor(str(blocker / "run"))
        for step in range(5):
            monitor.sample(step)
        monitor.close()
    assert any("cannot write" in r.getMessage() for r in caplog.records)


class _EqOnly(type):
    def __eq__(cls, other):  # defines __eq__ without __hash__: its classes are unhashable
        return cls is other

    __hash__ = None


class _Weird(metaclass=_EqOnly):
    pass


class _BadModule:
    pass


class _Evil(str):
    def __format__(self, spec):
        raise RuntimeError("no formatting for you")


class _HashRaises(type):
    def __hash__(cls):
        raise RuntimeError("no hashing for you")


class _Unhashed(metaclass=_HashRaises):
    pass


def test_hostile_classes_do_not_switch_the_census_off(tmp_path, caplog):
    instances = [_Weird() for _ in range(50)] + [_Unhashed() for _ in range(5)]
    _BadModule.__module__ = _Evil("evil")
    bad = [_BadModule() for _ in range(50)]
    with caplog.at_level(logging.WARNING, logger="tb_leak_plugin"):
        with tbleak.Monitor(str(tmp_path / "run"), **DENSE) as monitor:
            for step in range(5):
                instances.append(_Weird())
                bad.append(_BadModule())
                monitor.sample(step)
    assert not any("switched off" in r.getMessage() for r in caplog.records), \
        [r.getMessage() for r in caplog.records]
    # The census ran at every step; the numpy scan at least at the first and last.
    assert _points(tmp_path, "leak/gc/tracked_objects")["run"] == list(range(5))
    counts = _points(tmp_path, "leak/tensors/numpy_count")["run"]
    assert counts and counts[0] == 0, counts  # the steps the numpy scan ran at (it skips some)
    data = reader.load_logdir(str(tmp_path))
    tags = set(data.runs[0].series)
    assert any(tag.endswith("_BadModule") for tag in tags) or "leak/gc/tracked_objects" in tags
    del instances, bad
    gc.collect()


def test_census_counts_by_type_with_an_unhashable_class():
    objects = [_Weird() for _ in range(3)] + [[1], [2]]
    counts = probes.count_types(objects)
    assert counts.get("builtins.list") == 2


def test_memory_summary_inside_tf_function_is_measured_each_run(tmp_path):
    tf = pytest.importorskip("tensorflow")
    writer = tf.summary.create_file_writer(str(tmp_path / "run"))
    hold = []

    @tf.function
    def step_fn(step):
        tbleak.summary.memory(step=step)
        return tf.constant(0)

    with writer.as_default():
        for step in range(4):
            step_fn(tf.constant(step, tf.int64))
            hold.append(np.ones(1 << 20))  # 8 MiB, written, between runs: the values must differ
    writer.flush()
    data = reader.load_logdir(str(tmp_path))
    # The C allocator's bytes are exact (RSS lags and reuses pages); RSS where
    # mallinfo2 does not exist.
    series = data.runs[0].series.get("leak/process/malloc_bytes") or data.runs[0].series["leak/process/rss_bytes"]
    assert list(series.steps) == [0, 1, 2, 3]
    assert series.values[-1] - series.values[0] > 16 << 20

    @tf.function
    def census_fn():
        tbleak.summary.live_objects(step=0)
        return 0

    with writer.as_default(), pytest.raises(RuntimeError, match="tf.function"):
        census_fn()


def test_a_dear_numpy_scan_waits_when_the_budget_cannot_pay_for_it():
    probe = probes.LiveTensorsProbe()
    probe._numpy_cost_s = 0.5  # a scan that cost half a second last time
    census = probes.collect_objects()
    try:
        census.spare_s = 0.2  # what the walks' budget still has free
        tags = {info.tag for info, _value in probe.sample(census)}
        assert "leak/tensors/numpy_count" not in tags
        census.spare_s = 2.0  # affordable, and due by the probe's own spacing of dear scans
        probe._numpy_skipped = probe.NUMPY_MAX_SKIP
        tags = {info.tag for info, _value in probe.sample(census)}
        assert "leak/tensors/numpy_count" in tags
        # The last walk: a dear scan runs when the run's budget has room for
        # it and the point makes its series judgeable (three points before).
        census.final = True
        probe._numpy_cost_s, census.spare_s, probe._numpy_points = 0.5, 2.0, 1
        tags = {info.tag for info, _value in probe.sample(census)}
        assert "leak/tensors/numpy_count" not in tags, "a second point of a dear scan judges nothing"
        assert probe.final_scan_s() == 0.0
        probe._numpy_cost_s, probe._numpy_points = 0.5, probe.NUMPY_MIN_POINTS - 1
        assert probe.final_scan_s() == 0.5
        tags = {info.tag for info, _value in probe.sample(census)}
        assert "leak/tensors/numpy_count" in tags
        probe._numpy_cost_s, census.spare_s = 0.5, 0.1
        tags = {info.tag for info, _value in probe.sample(census)}
        assert "leak/tensors/numpy_count" not in tags, "no room left in the run's budget"
        probe._numpy_cost_s, census.spare_s = 0.01, None  # no budget (overhead_budget=None): always
        tags = {info.tag for info, _value in probe.sample(census)}
        assert "leak/tensors/numpy_count" in tags
    finally:
        census.release()


class _Keeper:  # a holder of the program's own: its attributes are searched for arrays
    def __init__(self):
        self.kept = []


def _numpy_scan(probe):
    census = probes.collect_objects()
    try:
        # The last walk with no budget: the scan runs however dear the last
        # one was (a large heap in a full test run); its schedule is tested above.
        census.final, census.spare_s = True, None
        return {info.tag: value for info, value in probe.sample(census)}
    finally:
        census.release()


def test_arrays_on_a_buffer_not_their_own_count_their_bytes_once_per_buffer():
    probe = probes.LiveTensorsProbe()
    keeper = _Keeper()
    before = _numpy_scan(probe)
    buffer = bytearray(1 << 20)
    # Two views of one foreign buffer (np.frombuffer: the array's base is the
    # buffer, as np.asarray(tensor)'s is a memoryview of the tensor's): 1 MiB.
    keeper.kept += [np.frombuffer(buffer, np.uint8), np.frombuffer(buffer, np.uint8)[: 1 << 10]]
    # An array that owns its 2 MiB, and a view of it (not counted again).
    owned = np.ones(1 << 18)
    keeper.kept += [owned, owned[:100]]
    after = _numpy_scan(probe)
    assert after["leak/tensors/numpy_count"] - before["leak/tensors/numpy_count"] == 4
    assert after["leak/tensors/numpy_bytes"] - before["leak/tensors/numpy_bytes"] == (1 << 20) + (2 << 20)
    del keeper, buffer, owned


def test_the_numpy_scan_leaves_out_the_monitors_own_arrays():
    """A leak watch keeps arrays of object ids and marks in its attributes
    (1 MB at a few walks of a small loop): counted as the program's, they
    grew a run's numpy bytes by half as much again as its leak, and the
    buffer that held the leak was not named (it held too little of that
    growth). The monitor's own objects' attributes are not scanned; the
    program's are, and an array both hold is still counted (here, through
    the program's object)."""
    from tb_leak_plugin.capture import online

    probe = probes.LiveTensorsProbe()
    keeper = _Keeper()
    watch = online.LeakWatch("run")
    before = _numpy_scan(probe)
    shared = np.ones(1 << 16)                 # 512 KiB, held by both
    watch.own_ids = np.zeros(1 << 17, np.int64)  # 1 MiB, the monitor's only
    watch.shared = shared
    keeper.kept.append(shared)
    after = _numpy_scan(probe)
    assert after["leak/tensors/numpy_bytes"] - before["leak/tensors/numpy_bytes"] == 1 << 19
    assert after["leak/tensors/numpy_count"] - before["leak/tensors/numpy_count"] == 1
    census = probes.collect_objects()
    try:
        found = probes.live_arrays(np.ndarray, census)
        assert any(a is shared for a in found) and not any(a is watch.own_ids for a in found)
        found = None
    finally:
        census.release()
    del keeper, watch, shared


def test_numpy_arrays_made_from_tensors_count_their_bytes():
    tf = pytest.importorskip("tensorflow")
    probe = probes.LiveTensorsProbe()
    keeper = _Keeper()
    before = _numpy_scan(probe)
    # What a callback keeping every epoch's predictions holds: np.asarray of a
    # model's output (its base is a view of the tensor's buffer, not an array).
    keeper.kept += [np.asarray(tf.ones((256, 256))) for _ in range(3)]
    assert not isinstance(keeper.kept[0].base, np.ndarray)
    after = _numpy_scan(probe)
    assert after["leak/tensors/numpy_count"] - before["leak/tensors/numpy_count"] == 3
    assert after["leak/tensors/numpy_bytes"] - before["leak/tensors/numpy_bytes"] == 3 * 256 * 256 * 4
    del keeper


class _Batch:  # weak-referenceable
    pass


def test_a_heap_walk_keeps_no_local_of_the_loop_alive(tmp_path):
    """Every step walks the heap (no budget), which reads the loop's locals:
    an object the loop deletes right after ``sample()`` is gone at once, not
    kept by a snapshot of the frame's locals until the next walk."""
    import weakref

    monitor = tbleak.Monitor(str(tmp_path), overhead_budget=None)
    alive_after_del = 0
    for step in range(8):
        batch = _Batch()
        ref = weakref.ref(batch)
        monitor.sample(step)
        del batch
        alive_after_del += ref() is not None
    monitor.close()
    assert monitor.stats()["units"]["heap"]["runs"] >= 8
    if sys.gettrace() is None and sys.getprofile() is None:
        assert alive_after_del == 0


def test_reading_a_functions_locals_keeps_the_names_exec_stored():
    """Reading a running function's locals (a leak trace's roots) takes its
    own variables back out of the frame's snapshot, never a name exec()
    stored there, which the program reads back with locals()."""
    from tb_leak_plugin.capture import referrers

    def step_fn(step):
        exec("doubled = step * 2")
        hops = referrers.running_locals()
        assert any(hop["name"] == "step" for hop, _value in hops)
        hops = None
        return locals()["doubled"]

    assert step_fn(21) == 42


_KEEPS_LOCALS = {}


def _train_keeping_its_locals(lr=0.1, epochs=2):
    config = locals()  # the program's own snapshot of its hyper-parameters
    import json
    before = dict(config)
    lists = [[] for _ in range(6)]
    for step in range(600):
        lists[step // 100].extend(range(16))  # bounded: one list grows in each period
        _KEEPS_LOCALS["monitor"].sample(step)
    assert sorted(config) == sorted(before), sorted(config)
    return json.dumps(config)


def test_a_clean_runs_frames_are_never_read_so_a_kept_locals_dict_is_unchanged(tmp_path):
    """A training function keeps the dict ``locals()`` returned (its
    hyper-parameters) and serialises it at the end. Reading its frame's
    locals on CPython before 3.13 re-syncs that very dict: it gained the
    function's later variables, itself among them, and ``json.dumps`` raised
    in the program (a review's attack: containers that grew at three walks
    were traced from roots that read the locals, in a clean run). A clean
    run's frames are never read: heap walks every 50 steps, containers that
    grow and stop."""
    import json

    from tb_leak_plugin import Monitor

    _KEEPS_LOCALS["monitor"] = monitor = Monitor(str(tmp_path / "run"), overhead_budget=None,
                                                 census_every_n_steps=50)
    try:
        assert json.loads(_train_keeping_its_locals()) == {"lr": 0.1, "epochs": 2}
    finally:
        monitor.close()
        _KEEPS_LOCALS.clear()


def test_a_local_array_is_named_for_growth_only_when_it_grew():
    """The arrays traced as a memory leak's holder are the locals that grew
    since the walk before and hold at least half the growth: a dataset loaded
    once (however large) and a step's batch (however it changes) are not."""
    import types

    from tb_leak_plugin.capture import online

    where = ("train.py:3", "train")
    report = types.SimpleNamespace(series=[types.SimpleNamespace(
        tag="leak/process/malloc_bytes", trend=types.SimpleNamespace(total_growth=8e6))])
    culprit = types.SimpleNamespace(name="leak/process/malloc_bytes")
    dataset, preds, batch = np.zeros(10_000_000), np.zeros(1_200_000), np.zeros(1000)

    def hop(name):
        return {"kind": "local", "where": where[0], "owner": where[1], "name": name}

    def sizes(*pairs):
        return [(key, size) for key, size, _t, _b in online._buffers([(hop(n), v) for n, v in pairs])]

    before = sizes(("dataset", dataset), ("preds", np.zeros(600_000)), ("batch", np.zeros(500)))
    now = sizes(("dataset", dataset), ("preds", preds), ("batch", batch))
    history = online._note_sizes(online._note_sizes({}, before), now)
    assert [now[i][0][-1] for i in online._growth_holding_arrays(culprit, report, now, history)] == ["preds"]
    # Without a reading before, nothing tells a grown array from a big one.
    assert online._growth_holding_arrays(culprit, report, now, online._note_sizes({}, now)) == []


class _Sampler:
    def __init__(self):
        self.data = np.zeros(2_000_000)       # a dataset loaded once: 16 MB
        self.epoch = self.data[:1_000_000].copy()  # re-bound each epoch, same size

    def next_epoch(self):
        self.epoch = self.data[1_000_000:].copy()


class _Bank:
    def __init__(self):
        self.rows = np.zeros((0, 64))

    def add(self, batch):
        self.rows = np.concatenate((self.rows, batch))


def test_an_attribute_is_named_only_when_it_grew_at_two_walks_by_half_the_growth():
    """An object's buffer is the holder of a memory growth only when that
    attribute grew at each of the last two walks and by at least half the
    growth since it was first seen: a dataset loaded once and an attribute
    re-bound to a new sample of the same size never are, however large."""
    import types

    from tb_leak_plugin.capture import online, probes

    report = types.SimpleNamespace(series=[types.SimpleNamespace(
        tag="leak/process/malloc_bytes", trend=types.SimpleNamespace(total_growth=4e6))])
    culprit = types.SimpleNamespace(name="leak/process/malloc_bytes")
    sampler, bank = _Sampler(), _Bank()
    history, named = {}, []
    for walk in range(4):
        sampler.next_epoch()
        bank.add(np.ones((4096, 64)))         # +2 MiB a walk
        census = probes.collect_objects()
        found = online._buffers(None, census)
        census.release()
        sizes = [(key, size) for key, size, _t, _b in found]
        history = online._note_sizes(history, sizes)
        named.append([online._attribute_hops(found[i][2], found[i][3])[0]["name"]
                      for i in online._growth_holding_arrays(culprit, report, sizes, history)])
        found = None
    assert named[:2] == [[], []]              # one growth seen: not yet
    assert named[2:] == [["rows"], ["rows"]], named


def test_a_buffer_first_seen_late_in_the_segment_is_held_to_what_grew_since():
    """The series grew 4 MB over steps 0-1000 (4 kB a step). A bank first
    seen at step 600 (1 MB) and grown at each of the walks after it to
    2.6 MB by step 1000 holds all of the growth since it was seen (1.6 MB),
    though not half of the segment's 4 MB: it is named (before, it was not:
    a buffer under 64 KiB at the walks before and one seen late in a loaded
    run's segment never was). An attribute re-bound to a sample of the same
    size, seen as long, is not."""
    import types

    from tb_leak_plugin.capture import online

    trend = types.SimpleNamespace(total_growth=4e6, fit={"start_step": 0, "end_step": 1000})
    report = types.SimpleNamespace(series=[types.SimpleNamespace(tag="leak/process/malloc_bytes", trend=trend)])
    culprit = types.SimpleNamespace(name="leak/process/malloc_bytes")
    bank, sample = ("object", 1, b"rows"), ("object", 2, b"sample")
    history = {}
    for step, rows in ((600, 1.0e6), (800, 1.8e6), (1000, 2.6e6)):
        sizes = [(bank, int(rows)), (sample, 2_100_000 + step)]  # re-bound: a few bytes apart
        history = online._note_sizes(history, sizes, step)
    assert online._growth_holding_arrays(culprit, report, sizes, history) == [0]
    # Where the first sighting is not known, the whole segment's growth is the bar.
    unknown = {key: entry[:3] + (None,) for key, entry in history.items()}
    assert online._growth_holding_arrays(culprit, report, sizes, unknown) == []
    assert online._growth_since(trend, 600) == pytest.approx(1.6e6)
    assert online._growth_since(trend, -50) == online._growth_since(trend, None) == 4e6


class _Slotted:
    __slots__ = ("buf", "n")

    def __init__(self):
        self.buf, self.n = bytearray(4096), 0


class _Stateful:
    def __init__(self):
        self.state = {"rows": bytearray(4096), "step": 0}


def test_a_buffer_is_named_in_a_slot_and_in_a_dict_attribute():
    from tb_leak_plugin.capture import online

    slotted, stateful = _Slotted(), _Stateful()
    assert online._attribute_hops(slotted, slotted.buf) == [{"kind": "attribute", "owner": "_Slotted", "name": "buf"}]
    assert online._attribute_hops(stateful, stateful.state["rows"]) == [
        {"kind": "attribute", "owner": "_Stateful", "name": "state"},
        {"kind": "key", "name": "rows", "key_type": "str"}]


class _HashCounter(str):
    calls = 0

    def __hash__(self):
        type(self).calls += 1
        return str.__hash__(self)


def test_the_buffer_scan_keeps_no_key_of_the_program_and_runs_none_of_its_code():
    """A global whose name is a str subclass with its own __hash__: the scan
    neither calls it nor keeps the key alive (such a global is not read);
    over 2,000 of the program's instances the globals are still read."""
    import gc
    import weakref

    from tb_leak_plugin.capture import online, probes

    module = sys.modules[__name__]
    key = _HashCounter("hostile_global_buffer")
    module.__dict__[key] = bytearray(128 * 1024)
    module.__dict__["plain_global_buffer"] = bytearray(128 * 1024)
    crowd = [_Stateful() for _ in range(2_500)]
    _HashCounter.calls = 0  # (storing it hashed it)
    try:
        census = probes.collect_objects()
        found = online._buffers(None, census)
        census.release()
        history = online._note_sizes({}, [(k, s) for k, s, _t, _b in found])
        found = None
        assert _HashCounter.calls == 0
        assert any(k[0] == "global" and k[2] == b"plain_global_buffer" for k in history)
        assert not any(k[0] == "global" and k[2] == b"hostile_global_buffer" for k in history)
        assert all(type(part) in (str, bytes, int, type(None)) for k in history for part in k), list(history)[:3]
        ref = weakref.ref(key)
    finally:
        del module.__dict__[key], module.__dict__["plain_global_buffer"]
        crowd = None
    del key
    gc.collect()
    assert ref() is None