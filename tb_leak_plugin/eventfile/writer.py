"""A minimal TensorBoard event-file writer that never imports TensorFlow.

TensorBoard's own ``EventFileWriter`` goes through ``tensorboard.compat.tf``,
which imports TensorFlow whenever it is installed: seconds of start-up and
hundreds of MiB in a PyTorch or plain Python job. This writer frames TFRecords
itself (length, masked CRC-32C, payload, masked CRC-32C). Local files are
appended to; remote paths go through TensorBoard's TensorFlow-free ``gfile``
stub, appending where its filesystem can and otherwise rewriting the whole
(small) file at each flush (its S3 filesystem has no append).

A failed write keeps the pending records for the next flush, and a local
file is cut back to its last complete record, so a full disk loses no
point once space returns and never leaves a torn record behind.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time

from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.io import gfile

from tb_leak_plugin.eventfile.records import frame as _record

_counter = itertools.count()



class RecordEventWriter:
    """Appends ``Event`` protos to a new event file under ``logdir``.

    Writes are buffered in memory and flushed when ``flush_secs`` have passed
    since the last flush (checked on each write), on ``flush()`` and on
    ``close()``. Thread-safe.
    """

    def __init__(self, logdir: str, flush_secs: float = 30.0, filename_suffix: str = ".tbleak"):
        self.logdir = logdir
        gfile.makedirs(logdir)
        name = "events.out.tfevents.%010d.%s.%d.%d%s" % (
            time.time(), socket.gethostname(), os.getpid(), next(_counter), filename_suffix)
        self.path = logdir.rstrip("/") + "/" + name if "://" in logdir else os.path.join(logdir, name)
        self._flush_secs = float(flush_secs)
        self._lock = threading.Lock()
        self._pending: list[bytes] = []
        self._last_flush = time.monotonic()
        self._closed = False
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
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        version = event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")
        self._pending.append(_record(version.SerializeToString()))
        self.flush()

    def add_event(self, event) -> None:
        record = _record(event.SerializeToString())
        with self._lock:
            if self._closed:
                return
            self._pending.append(record)
            due = time.monotonic() - self._last_flush >= self._flush_secs
        if due:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            if self._closed or not self._pending:
                self._last_flush = time.monotonic()
                return
            data = b"".join(self._pending)
            self._last_flush = time.monotonic()
            try:
                self._write(data)
            except Exception:
                self._rewind()
                raise  # the caller (the Monitor) logs it; records stay pending
            self._pending.clear()
            self._written += len(data)

    def _write(self, data: bytes) -> None:
        if self._fd is not None:
            view = memoryview(data)
            while view:  # unbuffered: nothing is left behind in a buffer on failure
                view = view[os.write(self._fd, view):]
        elif self._remote_copy is not None:
            self._fs.write(self.path, bytes(self._remote_copy) + data, binary_mode=True)
            self._remote_copy += data
        else:
            self._fs.append(self.path, data, binary_mode=True)

    def _rewind(self) -> None:
        """Cut a local file back to its last complete record after a failed write."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, self._written)
        except OSError:
            pass

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
