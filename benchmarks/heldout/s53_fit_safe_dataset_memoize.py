"""A "safe" dataset wrapper memoizes every item it has decoded, on a stream that never repeats (``model.fit``).

Source: msamogh/nonechucks#13 "Memory leak" (``SafeDataset``, which skips
samples that fail to load, wraps the user's dataset and "memoizes the
dataset items, with no parameter to change this"; iterating a large dataset
grows RAM forever: "Remove the ``@memoize`` line, and the leak is gone"),
the same pattern as MoonshotAI/Kimi-Audio#117 (``@lru_cache(maxsize=None)``
on a dataset's ``__getitem__``). Fix from the thread: no memoization of the
items (only what is cheap and bounded may be cached).
Summary: a Keras ``PyDataset`` streams through a large corpus, a new window
of samples every epoch, and is wrapped in a ``SafeDataset`` that memoizes
every decoded batch by its sample index, so that a corrupt sample is only
tried once. Nothing is ever read twice, so the memo only grows.

Here: 64 x 128 float32 batches (32 KiB) decoded with an FFT low-pass from
raw int16 records, a 128-256-10 MLP, 20 batches an epoch. The fixed twin
keeps a bounded ``lru_cache`` of the decoding filter only.

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +16.2 MiB RSS from 20 % of the run to the end (~34 KiB
per batch), fixed +1.0 MiB, flattening; ~27-30 ms a batch.
"""
import functools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/msamogh/nonechucks/issues/13"
SLICE = "holdout4"
STEPS = 600            # batches; 20 batches per epoch, 30 epochs
STEPS_PER_EPOCH = 20
BATCH = 64
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "tuple", "dict"],
              "holder_any": ["_memo", "SafeDataset"]},
    "fixed": {"verdict_not": "leak"},
}


@functools.lru_cache(maxsize=8)
def _lowpass(n, cutoff):
    f = np.fft.rfftfreq(n)
    return (f < cutoff).astype(np.float32)


class CorpusStream(keras.utils.PyDataset):
    """A large corpus read window by window: each epoch sees new samples."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.epoch = 0
        self.centers = np.random.default_rng(0).standard_normal((10, 128)).astype(np.float32)

    def __len__(self):
        return STEPS_PER_EPOCH

    def sample_index(self, idx):
        return (self.epoch * STEPS_PER_EPOCH + idx) * BATCH

    def decode(self, start):
        rng = np.random.default_rng(start)
        y = rng.integers(0, 10, size=BATCH)
        raw = (1000 * (self.centers[y] + rng.standard_normal((BATCH, 128)))).astype(np.int16)
        x = np.empty((BATCH, 128), dtype=np.float32)
        filt = _lowpass(4096, 0.025)
        for i in range(BATCH):                       # per-sample decode (upsampled low-pass)
            sig = np.interp(np.linspace(0, 127, 4096), np.arange(128), raw[i].astype(np.float32))
            sig = np.fft.irfft(np.fft.rfft(sig) * filt, n=4096)
            x[i] = sig[::32] / 1000.0
        return x, y

    def __getitem__(self, idx):
        return self.decode(self.sample_index(idx))

    def on_epoch_end(self):
        self.epoch += 1


class SafeDataset(keras.utils.PyDataset):
    """Skips items that fail to decode; as in the report, memoizes every item it returns."""

    def __init__(self, dataset, memoize=True, **kwargs):
        super().__init__(**kwargs)
        self.dataset = dataset
        self.memoize = memoize
        self._memo = {}

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, idx):
        key = self.dataset.sample_index(idx)
        if self.memoize and key in self._memo:
            return self._memo[key]
        try:
            item = self.dataset[idx]
        except (ValueError, OSError):
            item = self.dataset[(idx + 1) % len(self.dataset)]
        if self.memoize:
            self._memo[key] = item
        return item

    def on_epoch_end(self):
        self.dataset.on_epoch_end()


def _fit(logdir, steps, memoize):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input(shape=(128,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    data = SafeDataset(CorpusStream(), memoize=memoize)
    model.fit(data, epochs=max(1, steps // STEPS_PER_EPOCH), verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, memoize=True)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, memoize=False)
