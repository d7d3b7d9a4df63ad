"""A ``PyDataset`` samples training patches from a chunked electron-microscopy volume through a CloudVolume-style image LRU whose capacity is counted in bytes; decoded raw chunks are ``np.frombuffer(...).reshape(...)`` views whose buffer belongs to the downloaded ``bytes``, and the LRU sizes them with ``sys.getsizeof``, which charges a view ~100 bytes, so the 8 MiB budget is never reached and every chunk the sweep has read stays cached (``model.fit`` on a ``PyDataset`` + ``LeakCallback``; grows every batch, 16 KiB of native buffer a batch).

Source: seung-lab/cloud-volume pull request #695 "fix: account for numpy
array buffers in LRU sizing": "A byte-counted LRU (``size_in_bytes=True``)
holding decoded **raw** chunks never evicts — memory grows ~one decoded
chunk per read until the worker OOMs, and ``max_cache_bytes`` has no
effect. ... ``getsizeof`` in ``lru.py`` relied on ``sys.getsizeof``, which
only reports a numpy array's data buffer when the array **owns** it (``base
is None``) - Decoded raw chunks come from ``decode_raw`` ->
``np.frombuffer(bytestring, ...).reshape(...)``, a **view** whose ``.base``
is the source bytes." Fix used here (the PR's): an array is charged the
size of the buffer it keeps alive (its ``base``'s), so the budget holds.
Summary: a volume of 16x32x32 uint8 chunks (16 KiB each, "downloaded" as
raw bytes generated from the chunk id); the dataset sweeps the volume one
new chunk per batch and draws 32 patches of 8x8x8 voxels from the current
and the three previous chunks (which the LRU is meant to serve), labelled
by which of 4 intensity textures the chunk holds; a 512-128-4 Keras
classifier is trained with ``model.fit`` (40 batches an epoch).

Here: 3,200 batches (80 epochs). The fixed LRU charges each view its
base buffer and evicts past 8 MiB.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a stub callback in place of
``LeakCallback``): leaky 580.2 / 592.8 / 605.6 / 618.2 / 630.3 MiB RSS at
20 / 40 / 60 / 80 % / end (~20 KiB a batch: one more 16 KiB chunk buffer,
held through its ``frombuffer`` view, in ``lru._data``) with gc objects
327,074 -> 327,076 (flat: arrays and bytes are not tracked), 9.5 s for
3,200 batches (~3 ms a batch); fixed 578.5 / 580.2 / 580.8 / 581.1 / 581.1
MiB (the 8 MiB budget fills in the first ~500 batches) with objects
327,074 -> 327,076, 8.4 s.
"""
import collections
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/seung-lab/cloud-volume/pull/695"
SLICE = "holdout17"
STEPS = 3200            # batches; 40 per epoch, 80 epochs
PER_EPOCH = 40
BATCH = 32
CHUNK = (16, 32, 32)
PATCH = 8
TEXTURES = 4
LRU_BYTES = 8 * 2 ** 20
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "bytes", "numpy", "OrderedDict", "native"],
              "holder_any": ["_data", "lru", "LRU", "cache"]},
    "fixed": {"verdict_not": "leak"},
}


def _getsizeof_leaky(value):
    return sys.getsizeof(value)                                 # a view is charged its header only


def _getsizeof_fixed(value):
    if isinstance(value, np.ndarray) and value.base is not None:
        base = value
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        return sys.getsizeof(base)                              # the fix: the buffer it keeps alive
    return sys.getsizeof(value)


class LRU:
    """CloudVolume's ``lib.LRU`` with ``size_in_bytes=True``."""

    def __init__(self, size, getsizeof):
        self.size = size
        self.getsizeof = getsizeof
        self._data = collections.OrderedDict()
        self.nbytes = 0

    def get(self, key, default=None):
        if key not in self._data:
            return default
        self._data.move_to_end(key)
        return self._data[key]

    def __setitem__(self, key, value):
        if key in self._data:
            self.nbytes -= self.getsizeof(self._data.pop(key))
        self._data[key] = value
        self.nbytes += self.getsizeof(value)
        while self.nbytes > self.size and len(self._data) > 1:   # is_oversized()
            _, old = self._data.popitem(last=False)
            self.nbytes -= self.getsizeof(old)


def download_chunk(cid):
    """The storage backend: raw-encoded chunk bytes (the texture is a function of the id)."""
    rng = np.random.default_rng(cid)
    tex = cid % TEXTURES
    z = np.arange(CHUNK[0])[:, None, None]
    y = np.arange(CHUNK[1])[None, :, None]
    x = np.arange(CHUNK[2])[None, None, :]
    base = 60 + 40 * tex + 30 * np.sin((x + (tex + 1) * y + z) * (0.3 + 0.2 * tex))
    vol = np.clip(base + rng.normal(0, 20, CHUNK), 0, 255).astype(np.uint8)
    return vol.tobytes(), tex


def decode_raw(data):
    return np.frombuffer(data, dtype=np.uint8).reshape(CHUNK)


class VolumePatches(keras.utils.PyDataset):
    def __init__(self, lru, **kwargs):
        super().__init__(**kwargs)
        self.lru = lru
        self.rng = np.random.default_rng(0)
        self.cursor = 0                                          # the sweep never revisits a chunk

    def __len__(self):
        return PER_EPOCH

    def _chunk(self, cid):
        vol = self.lru.get(cid)
        if vol is None:
            data, _ = download_chunk(cid)
            vol = decode_raw(data)                               # a view of the downloaded bytes
            self.lru[cid] = vol
        return vol, cid % TEXTURES

    def __getitem__(self, idx):
        self.cursor += 1
        xs = np.empty((BATCH, PATCH ** 3), np.float32)
        ys = np.empty(BATCH, np.int32)
        for i in range(BATCH):
            cid = self.cursor - int(self.rng.integers(4))
            vol, tex = self._chunk(max(cid, 0))
            z, y, x = (self.rng.integers(0, s - PATCH + 1) for s in CHUNK)
            xs[i] = vol[z:z + PATCH, y:y + PATCH, x:x + PATCH].ravel() / 255.0
            ys[i] = tex
        return xs, ys


def _fit(logdir, steps, getsizeof):
    keras.utils.set_random_seed(0)
    data = VolumePatches(LRU(LRU_BYTES, getsizeof))
    model = keras.Sequential([keras.Input((PATCH ** 3,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(TEXTURES)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(data, epochs=max(1, steps // PER_EPOCH), verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, _getsizeof_leaky)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, _getsizeof_fixed)
