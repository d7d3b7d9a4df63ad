"""A minimal TensorBoard event-file writer that never imports TensorFlow.

TensorBoard's own ``EventFileWriter`` goes through ``tensorboard.compat.tf``,
which imports TensorFlow whenever it is installed: seconds of start-up and
hundreds of MiB in a PyTorch or plain Python job. This writer frames TFRecords
itself (length, masked CRC-32C, payload, masked CRC-32C).

Local files (:class:`RecordEventWriter`) are appended to. A failed write
keeps the pending records for the next flush, and the file is cut back to its
last complete record, so a full disk never leaves a torn record behind;
whatever fits is written, record by record. The backlog is bounded
(``MAX_PENDING_BYTES``): past it new records are dropped and counted
(``dropped_records``; ``add_event`` returns False), so a full disk cannot
grow the process. The summary writer re-sends a series' metadata with its
next point when the record that carried it was dropped, so what follows a
drop stays readable.

A local file that is deleted while the job runs (the logdir removed) is
noticed at the next flush: a new file is started in the recreated directory
(``generation`` counts them, so the summary writer re-sends tag metadata).
After ``os.fork()`` the child's copies of every writer are closed without
writing, so the parent's pending records are never written twice.

Remote logdirs (``s3://``, ``gs://``, ...: :class:`SegmentedEventWriter`)
go through TensorBoard's TensorFlow-free ``gfile``. Object stores cannot
append, so the event file is written as *segments*: each flush rewrites the
current segment object whole while it is under ``SEGMENT_BYTES`` (a put of at
most 256 KiB), then starts the next one (``...s000001.tbleak``, named to sort
after the last). Readers see a segment grow by whole records, as a local file
grows, and read a run's event files in name order, so TensorBoard and the CLI
read the segments as one file. Uploads run in a background thread: the
training loop never waits for the network; while the store is unreachable
the records wait (bounded by ``MAX_PENDING_BYTES``) and uploads are retried
with a back-off; the first failure is logged once.
"""

from __future__ import annotations

import array
import bisect
import itertools
import logging
import os
import socket
import threading
import time
import weakref

from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.io import gfile

from tb_leak_plugin.eventfile import remote
from tb_leak_plugin.eventfile.records import frame as _record

logger = logging.getLogger("tb_leak_plugin")

_counter = itertools.count()

# Pending bytes kept while writes fail (about 1,500 samples of ~60 series).
MAX_PENDING_BYTES = 4 << 20
# A local file is also written once this much is pending: the records a
# monitor buffers between timed flushes are memory of the process it
# measures, and must not look like a leak of it (about 1 KiB a sample).
FLUSH_PENDING_BYTES = 16 << 10
# A remote segment is rewritten whole at each flush until it holds this much.
SEGMENT_BYTES = 256 << 10
# How long close() keeps retrying the last remote upload.
CLOSE_TIMEOUT_S = 20.0
# Longest wait between retries of a failing remote upload.
MAX_RETRY_S = 60.0

_live_writers: "weakref.WeakSet[RecordEventWriter]" = weakref.WeakSet()


class PendingRecords:
    """Records waiting to be written, kept in two buffers allocated once.

    A list of ``bytes`` would hold one small object (one of Python's
    allocated blocks) per record until the next flush: the monitor's own
    memory, rising by a block a sample and falling at each flush, in the
    ``allocated_blocks`` series of the program it measures. As the monitor's
    samples thin out, one such cycle spans the last third of a run, where the
    analysis reads the current growth. Here the bytes go into one
    ``bytearray`` and each record's end into one ``array``, both sized for a
    flush's worth of records and reused: steady use allocates nothing that
    outlives a call. They grow (and stay grown) only past a flush's worth: a
    backlog while writes fail (up to ``MAX_PENDING_BYTES``), or the records a
    remote writer keeps between its timed uploads."""

    __slots__ = ("_data", "_ends", "nbytes", "count")

    def __init__(self, capacity: int):
        self._data = bytearray(capacity)
        self._ends = array.array("q", bytes(8 * max(64, capacity // 64)))
        self.nbytes = 0
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def append(self, record: bytes) -> None:
        n, m = self.nbytes, len(record)
        if n + m > len(self._data):
            self._data.extend(bytes(max(m, len(self._data))))
        if self.count == len(self._ends):
            self._ends.extend(array.array("q", bytes(8 * len(self._ends))))
        self._data[n:n + m] = record
        self._ends[self.count] = n + m
        self.count += 1
        self.nbytes = n + m

    def view(self) -> memoryview:
        """The pending bytes (release the view before the next ``append``)."""
        return memoryview(self._data)[:self.nbytes]

    def whole(self, sent: int, at_least_one: bool = False) -> tuple[int, int]:
        """(records, bytes) of the whole records within the first ``sent``
        bytes (``at_least_one``: the first record however large, if any)."""
        k = bisect.bisect_right(self._ends, sent, 0, self.count)
        if at_least_one and not k and self.count:
            k = 1
        return k, (self._ends[k - 1] if k else 0)

    def drop(self, records: int) -> None:
        """Forget the first ``records`` records (written)."""
        if records <= 0:
            return
        if records >= self.count:
            self.clear()
            return
        cut = self._ends[records - 1]
        self._data[:self.nbytes - cut] = self._data[cut:self.nbytes]
        rest = self.count - records
        for i in range(rest):
            self._ends[i] = self._ends[records + i] - cut
        self.count, self.nbytes = rest, self.nbytes - cut

    def clear(self) -> None:
        self.count = self.nbytes = 0


def _safe_tag(tag: str) -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "_" for c in str(tag))[:64]


def _after_fork_in_child() -> None:
    for writer in list(_live_writers):
        writer._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def open_event_writer(logdir: str, flush_secs: float = 30.0, filename_suffix: str = ".tbleak", name_tag: str = ""):
    """The writer for ``logdir``: segmented objects for a remote logdir, an appended file otherwise.
    ``name_tag`` (a task of a distributed job, ``worker-1``) goes into the file names."""
    if name_tag:
        filename_suffix = "." + _safe_tag(name_tag) + filename_suffix
    if remote.is_remote(logdir):
        return SegmentedEventWriter(logdir, flush_secs=flush_secs, filename_suffix=filename_suffix)
    return RecordEventWriter(logdir, flush_secs=flush_secs, filename_suffix=filename_suffix)


def _base_name() -> str:
    return "events.out.tfevents.%010d.%s.%d.%06d" % (time.time(), socket.gethostname(), os.getpid(), next(_counter))


def _version_record() -> bytes:
    return _record(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())


class RecordEventWriter:
    """Appends ``Event`` protos to a new event file under the local directory ``logdir``.

    Writes are buffered in memory and flushed when ``flush_secs`` have passed
    since the last flush or ``FLUSH_PENDING_BYTES`` are pending (checked on
    each write), on ``flush()`` and on ``close()``. Thread-safe.
    """

    def __init__(self, logdir: str, flush_secs: float = 30.0, filename_suffix: str = ".tbleak",
                 name_tag: str = ""):
        self.logdir = logdir
        # A task of a distributed job ("worker-1") names its files: tasks that
        # share a directory (same host name and pid in two containers) never
        # open one file.
        self._suffix = ("." + _safe_tag(name_tag) if name_tag else "") + filename_suffix
        self._flush_secs = float(flush_secs)
        self._lock = threading.Lock()
        self._pending = PendingRecords(FLUSH_PENDING_BYTES + 4096)
        self._last_flush = time.monotonic()
        self._closed = False
        self.dropped_records = 0
        #: Consecutive flushes that failed (0 after one succeeds).
        self.failed_flushes = 0
        #: Files started so far; grows when a deleted file is replaced.
        self.generation = 0
        #: Messages for the caller to log once (the file was replaced, ...).
        self.notices: list[str] = []
        self._open_file()
        _live_writers.add(self)
        self.flush()

    def _open_file(self) -> None:
        logdir = self.logdir
        gfile.makedirs(logdir)
        for _attempt in range(100):
            self.path = os.path.join(logdir, _base_name() + self._suffix)
            try:  # never append to another writer's file
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(f"no free event file name in {logdir!r}")
        self._written = 0  # bytes of complete records in the file
        self.generation += 1
        # A new file starts with its version record: nothing is pending
        # for it yet (a replaced file's records went with it).
        self._pending.clear()
        self._pending.append(_version_record())

    def add_event(self, event) -> bool:
        """Queue ``event``; False when it was dropped (closed, or the backlog
        is full: ``dropped_records`` counts those)."""
        record = _record(event.SerializeToString())
        with self._lock:
            if self._closed:
                return False
            if self._pending.nbytes + len(record) > MAX_PENDING_BYTES:
                self.dropped_records += 1
                return False
            self._pending.append(record)
            # Past the size (while writes succeed) or the time since the last flush.
            due = ((self._pending.nbytes >= FLUSH_PENDING_BYTES and not self.failed_flushes)
                   or time.monotonic() - self._last_flush >= self._flush_secs)
        if due:
            self.flush()
        return True

    def flush(self) -> None:
        """Write what is pending; raises OSError when not all of it could be
        written (what was written stays written, the rest stays pending)."""
        with self._lock:
            self._last_flush = time.monotonic()
            if self._closed or not self._pending:
                return
            self._replace_deleted_file()
            try:
                self._write_records()
            except Exception:
                self.failed_flushes += 1
                raise  # the caller (the Monitor) logs it; unwritten records stay pending
            self.failed_flushes = 0

    def _replace_deleted_file(self) -> None:
        if self._fd is None:
            return
        try:
            deleted = os.fstat(self._fd).st_nlink == 0
        except OSError:
            deleted = True
        if not deleted:
            return
        try:
            os.close(self._fd)
        except OSError:
            pass
        # Records encoded for the old file may lean on tag metadata that went
        # with it: start clean, and let the summary writer re-send metadata.
        self._pending.clear()
        self.notices.append(f"event file {self.path} was deleted while the job ran; writing a new one")
        self._open_file()

    def _write_records(self) -> None:
        sent = 0
        try:
            with self._pending.view() as view:
                while sent < len(view):  # unbuffered: nothing is left behind in a buffer on failure
                    sent += os.write(self._fd, view[sent:])
        finally:
            self._keep_complete(sent)

    def _keep_complete(self, sent: int) -> None:
        """After writing ``sent`` bytes of the pending records: keep the whole
        records written, cut the file back to the last of them, keep the rest."""
        done, whole = self._pending.whole(sent)
        if whole < self._pending.nbytes:
            # A failed write may have left part of a record (even bytes it did
            # not report): cut the file back to the last whole record.
            try:
                os.ftruncate(self._fd, self._written + whole)
            except OSError:
                pass
        self._written += whole
        self._pending.drop(done)

    def _forget_after_fork(self) -> None:
        """In a forked child: this copy of the writer must not write the parent's records."""
        self._lock = threading.Lock()  # a lock held by a parent thread stays held in the child
        self._pending.clear()
        self._closed = True
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._close_handle()

    def _close_handle(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)


class SegmentedEventWriter:
    """Writes ``Event`` protos under a remote ``logdir`` as segment objects.

    The same interface as :class:`RecordEventWriter` (``add_event``,
    ``flush``, ``close``, ``dropped_records``, ``failed_flushes``,
    ``generation``, ``notices``). Uploads happen in a background thread every
    ``flush_secs`` (and on ``flush()``/``close()``); ``add_event`` never
    touches the network. ``flush()`` waits for the upload (at most
    ``flush_timeout_s``) and raises OSError when it failed; ``close()`` keeps
    retrying for at most ``close_timeout_s``. Each put is at most
    ``segment_bytes`` plus one batch of new records; the objects of a run
    number about (bytes written) / ``segment_bytes``.
    """

    #: The Monitor keeps sampling while uploads fail: this writer retries by itself.
    retries_in_background = True

    def __init__(self, logdir: str, flush_secs: float = 30.0, filename_suffix: str = ".tbleak",
                 segment_bytes: int | None = None, flush_timeout_s: float = 30.0,
                 close_timeout_s: float | None = None):
        self.logdir = remote.normalize(logdir)
        self._suffix = filename_suffix
        self._flush_secs = float(flush_secs)
        self._segment_bytes = int(SEGMENT_BYTES if segment_bytes is None else segment_bytes)
        self._flush_timeout_s = float(flush_timeout_s)
        self._close_timeout_s = float(CLOSE_TIMEOUT_S if close_timeout_s is None else close_timeout_s)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        # A flush's worth of records (flush_secs of samples) in buffers
        # allocated once, as the local writer's (see PendingRecords).
        self._pending = PendingRecords(FLUSH_PENDING_BYTES + 4096)
        self._closed = False  # no more records accepted
        self._stop = False  # the uploader should finish
        self._flush_wanted = False
        self._failures = 0  # puts that failed so far
        self._thread: threading.Thread | None = None
        self._base = remote.join(self.logdir, _base_name())
        self._segment = 0
        self._segment_data = b""  # what the current segment object holds
        self._last_upload = time.monotonic()
        self._retry_at = 0.0
        self.dropped_records = 0
        self.failed_flushes = 0
        self.generation = 1
        self.notices: list[str] = []
        self.last_error: str | None = None
        #: Upload statistics: puts, bytes put and seconds spent putting.
        self.uploads = 0
        self.uploaded_bytes = 0
        self.upload_seconds = 0.0
        # Fails early (no network) for a scheme TensorBoard's gfile cannot serve.
        try:
            self._fs = gfile.get_filesystem(self.path)
        except Exception as error:
            raise OSError(remote.describe_error(error)) from None
        # Object stores need no directories (TensorBoard's S3 stub would put a
        # marker object for each); other filesystems (fsspec's) may.
        self._make_dirs = not remote.is_stub_s3(self.logdir)
        _live_writers.add(self)

    @property
    def path(self) -> str:
        """The current segment's object."""
        return self._segment_path(self._segment)

    def _segment_path(self, index: int) -> str:
        return "%s.s%06d%s" % (self._base, index, self._suffix)

    @property
    def segments(self) -> int:
        """Segment objects written so far."""
        return self._segment + (1 if self._segment_data else 0)

    def add_event(self, event) -> bool:
        """Queue ``event`` for upload; False when it was dropped (closed, or
        the backlog is full: ``dropped_records`` counts those)."""
        record = _record(event.SerializeToString())
        with self._lock:
            if self._closed:
                return False
            if self._pending.nbytes + len(record) > MAX_PENDING_BYTES:
                self.dropped_records += 1
                return False
            self._pending.append(record)
            self._ensure_thread()
            if time.monotonic() - self._last_upload >= self._flush_secs:
                self._wake.notify()
        return True

    def flush(self) -> None:
        """Upload what is pending now; raises OSError when that failed (the
        records stay pending and are retried)."""
        with self._lock:
            if not self._pending or self._stop:
                return
            self._ensure_thread()
            failures = self._failures
            self._flush_wanted = True
            self._wake.notify()
            deadline = time.monotonic() + self._flush_timeout_s
            while self._pending and self._failures == failures and not self._stop:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.wait(left)
            if self._pending:
                raise OSError(f"upload to {self.path} failed: {self.last_error or 'timed out'}")

    def close(self) -> None:
        with self._lock:
            if self._stop:
                return
            self._closed = True
            self._stop = True
            self._retry_at = 0.0  # one more try now, whatever the back-off said
            self._wake.notify_all()
            thread = self._thread
        if thread is None and self._pending:
            # Never started (or forked): upload in this thread, bounded in time.
            self._upload_loop()
        elif thread is not None:
            thread.join(self._close_timeout_s + 5.0)
        with self._lock:
            if self._pending:
                message = (f"{len(self._pending)} records were never uploaded to {self.logdir} "
                           f"({self.last_error or 'timed out'})")
                self.notices.append(message)
                self._pending.clear()

    # -- the uploader --------------------------------------------------------

    def _ensure_thread(self) -> None:
        if self._thread is None and not self._stop:
            self._thread = threading.Thread(target=self._upload_loop, name="tb-leak-upload", daemon=True)
            self._thread.start()

    def _upload_loop(self) -> None:
        close_deadline = None
        while True:
            with self._lock:
                while True:
                    now = time.monotonic()
                    if self._stop and close_deadline is None:
                        close_deadline = now + self._close_timeout_s
                    if self._stop and (not self._pending or now >= close_deadline):
                        self._wake.notify_all()
                        return
                    due = self._last_upload + self._flush_secs
                    ready = self._pending and (self._flush_wanted or self._stop or now >= due)
                    if ready and (now >= self._retry_at or self._flush_wanted):
                        break
                    wake_at = max(self._retry_at, due if self._pending else now + 3600.0)
                    if self._stop:
                        wake_at = min(wake_at, close_deadline)
                    self._wake.wait(max(0.01, wake_at - now))
                batch, count = self._take_batch()
                index, prefix = self._target(len(batch))
            body = prefix + batch
            started = time.perf_counter()
            error = None
            try:
                if self._make_dirs:
                    gfile.makedirs(self.logdir)
                    self._make_dirs = False
                self._fs.write(self._segment_path(index), body, binary_mode=True)
            except Exception as exc:  # the store is down, the bucket gone, ...: retry later
                error = exc
            spent = time.perf_counter() - started
            with self._lock:
                self._last_upload = time.monotonic()
                if error is None:
                    self.uploads += 1
                    self.uploaded_bytes += len(body)
                    self.upload_seconds += spent
                    self._segment, self._segment_data = index, body
                    self._pending.drop(count)
                    self.failed_flushes = 0
                    self._retry_at = 0.0
                    if not self._pending:
                        self._flush_wanted = False
                else:
                    self._failures += 1
                    self._flush_wanted = False  # a flush() waiting for this put sees it fail
                    self.failed_flushes += 1
                    first = self.last_error is None
                    self.last_error = remote.describe_error(error)
                    backoff = min(MAX_RETRY_S, max(1.0, self._flush_secs) * 2 ** min(self.failed_flushes - 1, 6))
                    self._retry_at = time.monotonic() + (0.5 if self._stop else backoff)
                    if first:
                        logger.warning("tb-leak: uploading summaries to %s failed (%s); retrying in the "
                                       "background, keeping at most %d KiB of them meanwhile",
                                       self.logdir, self.last_error, MAX_PENDING_BYTES >> 10)
                self._wake.notify_all()

    def _take_batch(self) -> tuple[bytes, int]:
        """(the bytes, the number) of the pending records for one put: at
        least one, at most about a segment."""
        count, size = self._pending.whole(self._segment_bytes, at_least_one=True)
        with self._pending.view() as view:
            return bytes(view[:size]), count

    def _target(self, size: int) -> tuple[int, bytes]:
        """(segment index, bytes already in it) for a put of ``size`` new bytes."""
        if not self._segment_data:
            return self._segment, _version_record()
        if len(self._segment_data) + size > self._segment_bytes:
            return self._segment + 1, _version_record()
        return self._segment, self._segment_data

    def _forget_after_fork(self) -> None:
        """In a forked child: this copy must not upload the parent's records."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pending.clear()
        self._closed = self._stop = True
        self._thread = None
