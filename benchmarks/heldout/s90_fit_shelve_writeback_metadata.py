"""A ``PyDataset`` reads per-sample records from an on-disk ``shelve`` opened with ``writeback=True``, so every record it touches stays in the shelf's in-memory cache until the shelf is closed (``model.fit``).

Source: Stack Overflow "How to use large dicts in python which not fit in
memory?" (20685880): the data set outgrows RAM and the asker tried
``shelve``, but "It seems that shelve needs the memory for everything you
put in it. It's not like it stores just parts of the data in memory and
the rest on disk." That is what ``writeback=True`` does: the ``shelve``
documentation says all accessed entries "are also cached in memory, and
written back on ``sync()`` and ``close()``", which "can consume much memory
for the cache". Fix (from the same documentation): open the shelf without
``writeback`` and store a modified entry back explicitly
(``rec = shelf[k]; ...; shelf[k] = rec``), or ``sync()`` regularly.
Summary: a detection-style data set keeps each sample's features, box and
label in a shelf prepared before training, and the ``PyDataset`` also
counts how often each sample was served (``rec["seen"] += 1``). Because
the mutation is done in place, the shelf was opened with
``writeback=True``, and its ``cache`` dict now keeps every record read
since the start of training: over one pass it pulls the whole shelf into
memory.

Here: 48,000 records (32 float32 features, one box, a label, a counter;
~0.8 KiB each in memory) in a ``dbm.dumb`` shelf in a temporary
directory, built before ``fit``; batches of 32, one pass over the data
(1,500 batches in 15 epochs of 100), a 32-128-10 MLP. The fixed twin opens
the shelf without ``writeback`` and writes each updated record back.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; ``LeakCallback`` replaced by a stub callback):
leaky +42.7 MiB RSS from 20 % of the run to the end (~36 KiB per batch,
+63 gc-tracked objects a batch: the records' dicts and lists), fixed +0.3
MiB (gc objects fluctuate, no trend); ~11-13 ms a batch after a ~3 s shelf
build (17-20 s; ~39 s under the runner).
"""
import dbm.dumb
import os
import shelve
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://stackoverflow.com/questions/20685880/how-to-use-large-dicts-in-python-which-not-fit-in-memory"
SLICE = "holdout7"
STEPS = 1500           # batches; 100 per epoch, 15 epochs, one pass over the records
STEPS_PER_EPOCH = 100
BATCH = 32
FEATURES = 32
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["dict", "ndarray", "numpy", "list"],
              "holder_any": ["cache", "Shelf", "SampleRecords"]},
    "fixed": {"verdict_not": "leak"},
}


def build_records(path, n, rng):
    centers = rng.standard_normal((10, FEATURES)).astype(np.float32)
    with shelve.Shelf(dbm.dumb.open(path, "n")) as shelf:
        for i in range(n):
            label = int(rng.integers(0, 10))
            x0, y0 = rng.random(2) * 0.5
            shelf["s%07d" % i] = {"x": centers[label] + rng.standard_normal(FEATURES).astype(np.float32),
                                  "box": [float(x0), float(y0), float(x0) + 0.3, float(y0) + 0.4],
                                  "label": label, "seen": 0}


class SampleRecords(keras.utils.PyDataset):
    def __init__(self, path, n, writeback, **kwargs):
        super().__init__(**kwargs)
        self.writeback = writeback
        self.n = n
        self.shelf = shelve.Shelf(dbm.dumb.open(path, "w"), writeback=writeback)
        self.order = np.random.default_rng(1).permutation(n)
        self.epoch = 0

    def __len__(self):
        return STEPS_PER_EPOCH

    def __getitem__(self, idx):
        start = ((self.epoch * STEPS_PER_EPOCH + idx) * BATCH) % self.n
        xs, ys = [], []
        for i in self.order[start:start + BATCH]:
            key = "s%07d" % i
            rec = self.shelf[key]                  # with writeback: also kept in self.shelf.cache
            rec["seen"] += 1
            if not self.writeback:
                self.shelf[key] = rec              # the fix: store the updated record back
            xs.append(rec["x"])
            ys.append(rec["label"])
        return np.stack(xs), np.array(ys)

    def on_epoch_end(self):
        self.epoch += 1

    def close(self):
        self.shelf.close()


def _fit(logdir, steps, writeback):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    n = max(BATCH, steps * BATCH)
    tmp = tempfile.mkdtemp(prefix="s90-shelf-")
    try:
        path = os.path.join(tmp, "records")
        build_records(path, n, rng)
        data = SampleRecords(path, n, writeback)
        model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                                  keras.layers.Dense(10)])
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(data, epochs=max(1, steps // STEPS_PER_EPOCH), verbose=0,
                  callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])
        data.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def leaky_fit(logdir, steps):
    _fit(logdir, steps, writeback=True)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, writeback=False)
