"""A minimal TensorBoard event-file writer that never imports TensorFlow.

TensorBoard's own ``EventFileWriter`` goes through ``tensorboard.compat.tf``,
which imports TensorFlow whenever it is installed: seconds of start-up and
hundreds of MiB in a PyTorch or plain Python job. This writer frames TFRecords
itself (length, masked CRC-32C, payload, masked CRC-32C). Local files are
appended to; remote paths go through TensorBoard's TensorFlow-free ``gfile``
stub, appending where its filesystem can and otherwise rewriting the whole
(small) file at each flush (its S3 filesystem has no append).

A failed write keeps the pending records for the next flush, and a local
file is cut back to its last complete record, so a full disk never leaves a
torn record behind; whatever fits is written, record by record. The backlog
is bounded (``MAX_PENDING_BYTES``): past it new records are dropped and
counted (``dropped_records``), so a full disk cannot grow the process.

A local file that is deleted while the job runs (the logdir removed) is
noticed at the next flush: a new file is started in the recreated directory
(``generation`` counts them, so the summary writer re-sends tag metadata).
After ``os.fork()`` the child's copies of every writer are closed without
writing, so the parent's pending records are never written twice.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
import weakref

from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.io import gfile

from tb_leak_plugin.eventfile.records import frame as _record

_counter = itertools.count()

# Pending bytes kept while writes fail (about 1,500 samples of ~60 series).
MAX_PENDING_BYTES = 4 << 20

_live_writers: "weakref.WeakSet[RecordEventWriter]" = weakref.WeakSet()


def _safe_tag(tag: str) -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "_" for c in str(tag))[:64]


def _after_fork_in_child() -> None:
    for writer in list(_live_writers):
        writer._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class RecordEventWriter:
    """Appends ``Event`` protos to a new event file under ``logdir``.

    Writes are buffered in memory and flushed when ``flush_secs`` have passed
    since the last flush (checked on each write), on ``flush()`` and on
    ``close()``. Thread-safe.
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
        self._pending: list[bytes] = []
        self._pending_bytes = 0
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
            name = "events.out.tfevents.%010d.%s.%d.%06d%s" % (
                time.time(), socket.gethostname(), os.getpid(), next(_counter), self._suffix)
            self.path = logdir.rstrip("/") + "/" + name if "://" in logdir else os.path.join(logdir, name)
            if "://" in self.path:
                break
            try:  # never append to another writer's file
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:
                continue
        else:
            raise FileExistsError(f"no free event file name in {logdir!r}")
        self._written = 0  # bytes of complete records in the file
        self._remote_copy: bytearray | None = None
        if "://" in self.path:
            self._fs = gfile.get_filesystem(self.path)
            if not hasattr(self._fs, "append"):
                self._remote_copy = bytearray()
            self._fs.write(self.path, b"", binary_mode=True)
            self._fd = None
        else:
            self._fs = None
        self.generation += 1
        version = event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")
        record = _record(version.SerializeToString())
        self._pending.insert(0, record)
        self._pending_bytes += len(record)

    def add_event(self, event) -> None:
        record = _record(event.SerializeToString())
        with self._lock:
            if self._closed:
                return
            if self._pending_bytes + len(record) > MAX_PENDING_BYTES:
                self.dropped_records += 1
                return
            self._pending.append(record)
            self._pending_bytes += len(record)
            due = time.monotonic() - self._last_flush >= self._flush_secs
        if due:
            self.flush()

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
        self._pending_bytes = 0
        self.notices.append(f"event file {self.path} was deleted while the job ran; writing a new one")
        self._open_file()

    def _write_records(self) -> None:
        if self._fd is None:
            data = b"".join(self._pending)
            self._write_remote(data)
            self._written += len(data)
            self._pending.clear()
            self._pending_bytes = 0
            return
        data = b"".join(self._pending)
        view = memoryview(data)
        sent = 0
        try:
            while sent < len(data):  # unbuffered: nothing is left behind in a buffer on failure
                sent += os.write(self._fd, view[sent:])
        finally:
            self._keep_complete(sent)

    def _keep_complete(self, sent: int) -> None:
        """After writing ``sent`` bytes of the pending records: keep the whole
        records written, cut the file back to the last of them, keep the rest."""
        done = 0
        whole = 0
        for record in self._pending:
            if whole + len(record) > sent:
                break
            whole += len(record)
            done += 1
        if whole < self._pending_bytes:
            # A failed write may have left part of a record (even bytes it did
            # not report): cut the file back to the last whole record.
            try:
                os.ftruncate(self._fd, self._written + whole)
            except OSError:
                pass
        self._written += whole
        del self._pending[:done]
        self._pending_bytes -= whole

    def _write_remote(self, data: bytes) -> None:
        if self._remote_copy is not None:
            self._fs.write(self.path, bytes(self._remote_copy) + data, binary_mode=True)
            self._remote_copy += data
        else:
            self._fs.append(self.path, data, binary_mode=True)

    def _forget_after_fork(self) -> None:
        """In a forked child: this copy of the writer must not write the parent's records."""
        self._lock = threading.Lock()  # a lock held by a parent thread stays held in the child
        self._pending.clear()
        self._pending_bytes = 0
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
