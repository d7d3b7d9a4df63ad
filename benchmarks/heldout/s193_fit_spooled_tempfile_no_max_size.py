"""A training-dynamics callback records, after every batch, the model's logits and per-example losses on a fixed probe set (a "data map" of which examples are learned when) and spools the records into a ``tempfile.SpooledTemporaryFile()`` that is uploaded when training ends, expecting it to spill to disk once it gets large; with the default ``max_size=0`` a ``SpooledTemporaryFile`` never rolls over, so the whole record stream stays in its in-memory ``BytesIO`` for the run (``model.fit`` + ``LeakCallback``; grows every batch, native memory).

Source: magic-wormhole/magic-wormhole issue #379 "Temporary Storage in RAM"
and pull request #382 "cmd_send: use SpooledTemporaryFile properly, move
to disk after 10MB": "SpooledTemporaryFile doesn't have a default
threshold size: if you don't specify one, it will never switch to the
disk-based mode, and `wormhole send large_directory/` will just use up
all your RAM until it crashes ... This applies the simple fix: provide a
`max_size=` argument"; the same default in jschneier/django-storages
issue #936 ("The default of 0 means 'never rollover, keep contents only
in memory'"), fixed in pull request #1359. Fix used here (the PR's):
``SpooledTemporaryFile(max_size=1 MiB)``: the first MiB stays in memory
(a bounded buffer that fills in the first ~5 % of the run), then the file
rolls over to disk.
Summary: a 32-64-10 Keras classifier on Gaussian clusters, batch 32, 50
batches an epoch; a 48-example probe set; each record is a JSON header
(step, loss, learning rate) and the ``np.save`` of the probe logits and
per-example losses, ~2.4 KB.

Here: 160 epochs (8,000 batches). The fixed twin passes ``max_size``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; a stub callback in place of
``LeakCallback``): leaky 569.7 / 573.6 / 577.4 / 581.2 / 584.9 MiB RSS at
20 / 40 / 60 / 80 % / end (~2.4 KB a batch, in the spool's ``BytesIO``)
with gc objects 327,770 -> 327,773, 27.1 s for 8,000 batches (~3.4 ms a
batch); fixed 564.0 / 565.6 / 565.7 / 565.8 / 565.8 MiB (rolled over to
disk after ~430 batches) with objects 327,771 -> 327,774, 33.9 s.
"""
import json
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/magic-wormhole/magic-wormhole/issues/379"
SLICE = "holdout16"
STEPS = 8000           # batches; 50 per epoch, 160 epochs
BATCH = 32
STEPS_PER_EPOCH = 50
FEATURES = 32
CLASSES = 10
PROBE = 48
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "BytesIO", "SpooledTemporaryFile", "rss"],
              "holder_any": ["_file", "SpooledTemporaryFile", "spool", "DataMapRecorder"]},
    "fixed": {"verdict_not": "leak"},
}


class DataMapRecorder(keras.callbacks.Callback):
    def __init__(self, probe_x, probe_y, max_size):
        super().__init__()
        self.probe_x = tf.constant(probe_x)
        self.probe_y = probe_y
        self.max_size = max_size
        self.spool = None
        self.step = 0

    def on_train_begin(self, logs=None):
        self.spool = tempfile.SpooledTemporaryFile(max_size=self.max_size)   # the leak: max_size=0

    def on_train_batch_end(self, batch, logs=None):
        logits = self.model(self.probe_x, training=False).numpy()
        z = logits - logits.max(1, keepdims=True)
        losses = (np.log(np.exp(z).sum(1)) - z[np.arange(PROBE), self.probe_y]).astype(np.float32)
        header = {"step": self.step, "loss": float(logs["loss"]) if logs and "loss" in logs else None,
                  "lr": float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))}
        self.spool.write(json.dumps(header).encode() + b"\n")
        np.save(self.spool, logits.astype(np.float32), allow_pickle=False)
        np.save(self.spool, losses, allow_pickle=False)
        self.step += 1

    def on_train_end(self, logs=None):
        self.spool.seek(0)
        with open(os.devnull, "wb") as upload:                       # stands in for the upload
            shutil.copyfileobj(self.spool, upload)
        self.spool.close()


def _fit(logdir, steps, max_size):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32) * 1.5
    n = STEPS_PER_EPOCH * BATCH
    y = rng.integers(0, CLASSES, n).astype(np.int32)
    x = centers[y] + rng.standard_normal((n, FEATURES), dtype=np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    recorder = DataMapRecorder(x[:PROBE], y[:PROBE], max_size)
    model.fit(x, y, batch_size=BATCH, epochs=max(1, steps // STEPS_PER_EPOCH), shuffle=True, verbose=0,
              callbacks=[recorder, tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, max_size=0)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, max_size=1 << 20)
