"""A minimal TensorBoard event-file writer that never imports TensorFlow.

TensorBoard's own ``EventFileWriter`` goes through ``tensorboard.compat.tf``,
which imports TensorFlow whenever it is installed: seconds of start-up and
hundreds of MiB in a PyTorch or plain Python job. This writer frames TFRecords
itself (length, masked CRC-32C, payload, masked CRC-32C) and opens files
through TensorBoard's TensorFlow-free ``gfile`` stub, so local paths and the
stub's remote filesystems both work.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import threading
import time

from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.io import gfile

from tb_leak_plugin.loading import masked_crc

_counter = itertools.count()


def _record(payload: bytes) -> bytes:
    header = struct.pack("<Q", len(payload))
    return header + struct.pack("<I", masked_crc(header)) + payload + struct.pack("<I", masked_crc(payload))


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
        if "://" in self.path:
            # Remote filesystems of TensorBoard's stub append whole blobs.
            self._fs = gfile.get_filesystem(self.path)
            self._fs.write(self.path, b"", binary_mode=True)
            self._handle = None
        else:
            self._fs = None
            self._handle = open(self.path, "ab")
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
            self._pending.clear()
            if self._handle is not None:
                self._handle.write(data)
                self._handle.flush()
            else:
                self._fs.append(self.path, data, binary_mode=True)
            self._last_flush = time.monotonic()

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._handle is not None:
                self._handle.close()
