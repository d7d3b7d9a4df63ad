"""A ``PyDataset`` decodes training samples from a telemetry byte stream pushed into a streaming frame parser with ``feed()``; the parser drops consumed bytes only on its read-from-a-file path, so in feeding mode its ``bytearray`` keeps every byte ever received (``model.fit``; gc counts flat).

Source: msgpack/msgpack-python#283 "memory leak in the pure python
Unpacker (when using .feed())" ("i only found places where it grows
self._buffer (e.g. in Unpacker.feed), but no place where it shrinks it";
a reply: "``Unpacker`` only clears its buffer when it needs to read from
stream. This never happens in feeding mode ... We should probably
look into clearing the buffer in ``feed()`` if necessary"), and the same
pattern in ArduPilot/pymavlink#130 "Memory leak in generated dialect code"
("a bytearray being extended over and over again, taking up more and more
memory over time", because the buffer was only replaced when it was
completely empty). Fix, the one the msgpack thread points to: drop the
consumed prefix in ``feed()`` as well (here once it passes 64 KiB).
Summary: sensor frames (an 8-byte header with sync byte, label, payload
length and sequence number, then 64 float32 readings) arrive from a link
in chunks of arbitrary size, as from a socket. The dataset pushes each
chunk into ``FrameParser.feed`` and pulls decoded frames with
``next_frame``. The parser's compaction (``del self.buf[:self.buf_index]``)
lives in ``_fill_from_file``, the path used when it reads a recording
itself; in feeding mode it never runs, so ``self.buf`` (one ``bytearray``,
not tracked by the collector) grows by every byte received: ~8.4 KiB a
batch of 32 frames.

Here: a 64-128-10 Keras MLP trained on 32 decoded frames a batch, 100
batches an epoch; chunk sizes drawn between 100 and 1,500 bytes. The fixed
twin compacts in ``feed`` once the consumed prefix exceeds 64 KiB.

Checked without tb-leak (psutil RSS, gc objects and tracemalloc; fresh
process, TF 2.21 / Keras 3.15 / Python 3.11; ``LeakCallback`` replaced by
a stub callback): leaky +20.2 MiB RSS from 20 % of the run to the end
(~8.6 KiB a batch; 568.2 / 573.2 / 588.4 MiB at 20 % / 40 % / end) with gc
objects flat (327,110 / 327,111 / 327,111) and tracemalloc +21.1 MiB
(168.9 / 174.1 / 190.0, in a run with tracemalloc on), fixed 564.7 /
564.9 / 565.0 MiB, tracemalloc flat (164.0 / 164.0 / 164.1); ~5.5 ms a
batch (17 s for 3,000 batches, with another job on the machine).
"""
import os
import struct

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/msgpack/msgpack-python/issues/283"
SLICE = "holdout9"
STEPS = 3000           # batches; 100 per epoch, 30 epochs
STEPS_PER_EPOCH = 100
BATCH = 32
FEATURES = 64
CLASSES = 10
HEADER = struct.Struct("<BBHI")       # sync, label, payload length, sequence
SYNC = 0xFE
COMPACT_AT = 64 * 1024
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["bytearray", "native", "rss", "FrameParser"],
              "holder_any": ["buf", "FrameParser", "parser"]},
    "fixed": {"verdict_not": "leak"},
}


class TelemetryLink:
    """The sending side: frames serialized back to back, delivered in arbitrary chunks."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.centers = self.rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
        self.seq = 0
        self.pending = b""

    def _frame(self):
        y = int(self.rng.integers(CLASSES))
        x = (self.centers[y] + self.rng.standard_normal(FEATURES, dtype=np.float32)).tobytes()
        self.seq += 1
        return HEADER.pack(SYNC, y, len(x), self.seq) + x

    def recv(self):
        n = int(self.rng.integers(100, 1500))
        while len(self.pending) < n:
            self.pending += self._frame()
        chunk, self.pending = self.pending[:n], self.pending[n:]
        return chunk


class FrameParser:
    """Streaming decoder: ``feed()`` bytes in, ``next_frame()`` frames out (or read a recording itself)."""

    def __init__(self, compact_on_feed, recording=None):
        self.compact_on_feed = compact_on_feed
        self.recording = recording
        self.buf = bytearray()
        self.buf_index = 0

    def feed(self, chunk):
        if self.compact_on_feed and self.buf_index > COMPACT_AT:     # the fix: compact in feed() too
            del self.buf[:self.buf_index]
            self.buf_index = 0
        self.buf.extend(chunk)

    def _fill_from_file(self, n=65536):
        if self.buf_index:                                             # the only place that compacts
            del self.buf[:self.buf_index]
            self.buf_index = 0
        self.buf.extend(self.recording.read(n))

    def buf_len(self):
        return len(self.buf) - self.buf_index

    def next_frame(self):
        if self.recording is not None and self.buf_len() < HEADER.size + 4 * FEATURES:
            self._fill_from_file()
        if self.buf_len() < HEADER.size:
            return None
        sync, label, length, seq = HEADER.unpack_from(self.buf, self.buf_index)
        if sync != SYNC:
            raise ValueError("lost sync at %d" % self.buf_index)
        if self.buf_len() < HEADER.size + length:
            return None
        start = self.buf_index + HEADER.size
        x = np.frombuffer(self.buf, np.float32, length // 4, start).copy()
        self.buf_index = start + length
        return x, label


class TelemetryDataset(keras.utils.PyDataset):
    def __init__(self, compact, **kwargs):
        super().__init__(**kwargs)
        self.link = TelemetryLink()
        self.parser = FrameParser(compact)

    def __len__(self):
        return STEPS_PER_EPOCH

    def __getitem__(self, idx):
        batch = []
        while len(batch) < BATCH:
            frame = self.parser.next_frame()
            if frame is None:
                self.parser.feed(self.link.recv())
            else:
                batch.append(frame)
        return np.stack([x for x, _ in batch]), np.array([y for _, y in batch])


def _fit(logdir, steps, compact):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(TelemetryDataset(compact), epochs=max(1, steps // STEPS_PER_EPOCH), verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, compact=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, compact=True)
