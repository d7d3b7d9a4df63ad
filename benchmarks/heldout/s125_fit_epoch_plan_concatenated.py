"""A ``PyDataset`` regenerates its shuffled index order and per-sample augmentation plan in ``on_epoch_end``, but concatenates the new plan onto the old one instead of replacing it; ``__getitem__`` only reads the last epoch's slice, so nothing looks wrong while the plan array grows by a full epoch's worth every epoch (``model.fit``; grows in bursts, once an epoch).

Source: keras-team/keras#12100 "Memory leak using fit_generator" (a
``keras.utils.Sequence`` whose indexes start as
``np.array([], dtype=np.int64).reshape(0, 1)`` and are (re)generated in
``generate_indexes`` / ``on_epoch_end``; the maintainer's rerun "stabilizes
around 6% after some epochs" once the indexes are rebuilt rather than
accumulated), and the ``Sequence`` pattern of regenerating indexes at each
epoch end. Fix: assign the new plan (``self.plan = new_plan``).
Summary: 6,400 training images are served in batches of 32. At each
epoch end the dataset draws a new permutation plus, per sample, a mixup
partner, a mixup weight, a random crop box and colour-jitter factors (a
float32 row of 64 numbers), and does
``self.plan = np.concatenate([self.plan, new_plan])``. Batches index
``self.plan[-N:]``, so training is correct; the array grows by ~1.6 MiB
an epoch and is re-copied at every concatenation.

Here: 32 x 32 x 1 synthetic images flattened to 1,024 features, a
1024-64-10 Keras MLP, 200 batches an epoch, 30 epochs. The fixed twin
replaces the plan.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; ``LeakCallback`` replaced by a stub callback): leaky
738.3 / 748.2 / 774.8 MiB RSS at 20 % / 40 % / end and tracemalloc 176.3 /
185.7 / 212.2 MiB (~1.5 MiB an epoch, in steps at each epoch end) with gc
objects flat (326,908 / 326,908 / 326,904: one array that grows), fixed
724.8 / 724.5 / 726.1 MiB, tracemalloc 165.9 / 165.3 / 165.3 MiB, same
objects; ~3 ms a batch (18.4 s leaky, 19.9 s fixed for 6,000 batches).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/keras-team/keras/issues/12100"
SLICE = "holdout10"
STEPS = 6000           # batches; 200 per epoch, 30 epochs
N = 6400
BATCH = 32
PIXELS = 1024
PLAN_COLS = 64
CLASSES = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "native", "rss"],
              "holder_any": ["plan", "AugmentedImages"]},
    "fixed": {"verdict_not": "leak"},
}


class AugmentedImages(keras.utils.PyDataset):
    def __init__(self, accumulate, **kwargs):
        super().__init__(**kwargs)
        self.accumulate = accumulate
        self.rng = np.random.default_rng(0)
        self.templates = self.rng.normal(size=(CLASSES, PIXELS)).astype(np.float32)
        self.labels = self.rng.integers(0, CLASSES, N).astype(np.int32)
        self.plan = np.zeros((0, PLAN_COLS), np.float32)
        self.on_epoch_end()

    def _new_plan(self):
        plan = self.rng.random((N, PLAN_COLS), dtype=np.float32)
        plan[:, 0] = self.rng.permutation(N)                   # sample order
        plan[:, 1] = self.rng.integers(0, N, N)                # mixup partner
        return plan

    def on_epoch_end(self):
        new_plan = self._new_plan()
        if self.accumulate:
            self.plan = np.concatenate([self.plan, new_plan])   # the leak: appended, never replaced
        else:
            self.plan = new_plan                                # the fix

    def __len__(self):
        return N // BATCH

    def __getitem__(self, idx):
        rows = self.plan[-N:][idx * BATCH:(idx + 1) * BATCH]
        order = rows[:, 0].astype(np.int64)
        partner = rows[:, 1].astype(np.int64)
        lam = 0.8 + 0.2 * rows[:, 2:3]
        y = self.labels[order]
        x = self.templates[y] * (0.9 + 0.2 * rows[:, 3:4])
        x = lam * x + (1 - lam) * self.templates[self.labels[partner]]
        x += 0.3 * self.rng.standard_normal(x.shape, dtype=np.float32)
        return x, y


def _fit(logdir, steps, accumulate):
    keras.utils.set_random_seed(0)
    data = AugmentedImages(accumulate)
    model = keras.Sequential([keras.Input((PIXELS,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(data, epochs=max(1, steps // (N // BATCH)), verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, accumulate=True)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, accumulate=False)
