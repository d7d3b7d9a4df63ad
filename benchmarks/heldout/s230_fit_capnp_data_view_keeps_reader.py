"""A ``PyDataset`` decodes each batch from a packed Cap'n Proto message and reads its float32 feature block zero-copy with ``reader.get_data_as_view("features")``; like pycapnp 2.2's, the view is built with the reader as the buffer's exporter but the extra reference taken on the reader is never released, so each batch's struct reader, its message, the unpacked segment and the original packed input stay alive after the view is released and every Python name is gone, with no referrer at all (``model.fit`` on a ``PyDataset`` + ``LeakCallback``; a leaked reference, not a holder; grows every batch, ~32 KiB a batch).

Source: capnproto/pycapnp pull request #406 "Fix: ``get_data_as_view``
retaion the backing reader/builder even after the view is released,
leading to memory leakage": "Calling ``get_data_as_view()`` on a ``Data``
field seems to keep the backing Cap'n Proto reader/builder alive even
after: the returned ``memoryview`` is deleted, ``memoryview.release()`` is
called, the reader/builder object is deleted, ``gc.collect()`` and
``malloc_trim(0)`` are called. For packed readers, this also keeps the
original packed input buffer alive. This causes linear RSS growth when
decoding messages with large ``Data`` fields in a loop" (the bare
``PyMemoryView_FromBuffer`` call never gives back the reference that
``PyBuffer_FillInfo`` took on the exporter). Fix used here (the PR's): the
view pins its reader through a proper exporter and releases it with the
view.
Summary: a 64-128-5 softmax classifier trained with ``model.fit`` (Adam, 50
batches an epoch); each batch of 64 rows arrives as one packed message (a
``Batch`` struct: a JSON header text field, a ``Data`` field of labels and a
``Data`` field of float32 features, packed with zlib as a stand-in for
capnp packing); the reader is a small Python stand-in and the leaked
reference is taken with ``Py_IncRef`` (ctypes) where the C code took it.

Here: 3,000 batches (60 epochs). The fixed reader's views release it.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a stub callback in place of
``LeakCallback``; RSS read before each object count, at the marks only):
leaky 583.9 / 603.3 / 622.4 / 642.0 / 661.2 MiB RSS at 20 / 40 / 60 / 80 %
/ end (562.5 MiB at the first batch; ~33 KiB a batch: the ~16 KiB unpacked segment and the ~15 KiB packed input of every batch's message, held by the leaked
``StructReader``) with gc objects 327,289 at the first batch, then 329,156
/ 331,067 / 332,723 / 334,493 / 336,482 at the same marks (~3 a batch: the
struct reader, its message reader and the field table; the byte strings
are not tracked), 12.3 s for 3,000 batches (~4.1 ms a batch); fixed 565.7
/ 566.4 / 566.5 / 566.5 / 566.5 MiB with objects 327,287 / 327,288 /
327,288 / 327,287 / 327,289, 15.0 s (~5 ms a batch); the fixed run's 0.8
MiB over its first 40 % is Keras's own settling. 17-19 s a variant in its
process, imports included.
"""
import ctypes
import json
import os
import struct
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/capnproto/pycapnp/pull/406"
SLICE = "holdout19"
STEPS = 3000            # batches; 50 per epoch, 60 epochs
PER_EPOCH = 50
BATCH = 64
FEATURES = 64
CLASSES = 5
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["StructReader", "MessageReader", "bytes", "native"]},
    "fixed": {"verdict_not": "leak"},
}

_Py_IncRef = ctypes.pythonapi.Py_IncRef
_Py_IncRef.argtypes = [ctypes.py_object]
_Py_IncRef.restype = None


def _pack(fields):
    """Serialize {name: bytes} as length-prefixed segments, then 'pack' (zlib)."""
    out = bytearray()
    for name, value in fields.items():
        key = name.encode()
        out += struct.pack("<HI", len(key), len(value)) + key + value
    return zlib.compress(bytes(out), 1)


class PackedMessageReader:
    def __init__(self, packed):
        self._packed = packed                                # packed readers keep their input
        self._segment = zlib.decompress(packed)
        self._fields = {}
        pos = 0
        while pos < len(self._segment):
            klen, vlen = struct.unpack_from("<HI", self._segment, pos)
            pos += 6
            name = self._segment[pos:pos + klen].decode()
            pos += klen
            self._fields[name] = (pos, vlen)
            pos += vlen

    def get_root(self):
        return StructReader(self)


class StructReader:
    leaks_exporter_ref = True

    def __init__(self, message):
        self._message = message

    def get_text(self, name):
        off, size = self._message._fields[name]
        return self._message._segment[off:off + size].decode()

    def get_data_as_view(self, name):
        off, size = self._message._fields[name]
        if StructReader.leaks_exporter_ref:
            _Py_IncRef(self)                                 # the reference the C code never gave back
        return memoryview(self._message._segment)[off:off + size]


class PackedBatches(keras.utils.PyDataset):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        rng = np.random.default_rng(0)
        self.centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
        self.served = 0

    def __len__(self):
        return PER_EPOCH

    def _receive(self, seq):
        """The wire: one packed Batch message (built here, as the sensor gateway would)."""
        rng = np.random.default_rng(seq)
        y = rng.integers(0, CLASSES, BATCH).astype(np.int32)
        x = (self.centers[y] + 1.4 * rng.standard_normal((BATCH, FEATURES))).astype(np.float32)
        header = json.dumps({"seq": seq, "rows": BATCH, "features": FEATURES, "source": "gw-07"})
        return _pack({"header": header.encode(), "labels": y.tobytes(), "features": x.tobytes()})

    def __getitem__(self, idx):
        self.served += 1
        reader = PackedMessageReader(self._receive(self.served)).get_root()
        header = json.loads(reader.get_text("header"))
        view = reader.get_data_as_view("features")
        x = np.frombuffer(view, dtype=np.float32).reshape(header["rows"], header["features"]).copy()
        view.release()
        view = reader.get_data_as_view("labels")
        y = np.frombuffer(view, dtype=np.int32).copy()
        view.release()
        del reader
        return x, y


def _fit(logdir, steps, leaks):
    StructReader.leaks_exporter_ref = leaks
    keras.utils.set_random_seed(0)
    data = PackedBatches()
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(data, epochs=max(1, steps // PER_EPOCH), verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, leaks=True)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, leaks=False)
