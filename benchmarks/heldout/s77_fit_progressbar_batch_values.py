"""A progress-bar callback keeps every batch's metric values (and its formatted postfix) to show running means, over an epoch that spans the whole run (``model.fit``; small, slow leak).

Source: bstriner/keras-tqdm#29 "on_batch_end incredibly slow" (an epoch of
~2 million samples at batch size 1: "The problem seems to be the call to
``np.mean(logs[metric], axis=None)`` inside the ``format_metrics``
function. When you're training 100 batches per second that log gets big
fast": the callback appends every batch's value to a per-metric list).
Fix (the usual one for progress bars, e.g. Keras' ``Progbar``): keep a
running sum and count per metric.
Summary: a tqdm-style callback shows running means of the metrics. It
appends each batch's values to ``self.values[metric]`` and keeps the
postfix it formatted, and it resets them only at the start of an epoch,
here one long epoch over a streamed dataset, so they grow for the whole
run; the display gets slower too.

Here: a 32-64-2 MLP on batches of 32 from a repeating ``tf.data`` stream,
one epoch of 12,000 batches; two metrics. The fixed twin keeps a sum and
a count per metric and only the latest postfix.

Checked without tb-leak (psutil RSS, gc objects, tracemalloc; fresh
process, TF 2.21 / Keras 3.15 / Python 3.11; ``LeakCallback`` replaced by
a stub callback): leaky +1.5 MiB RSS from 20 % of the run to the end (~0.16 KiB per batch,
steady: two floats and a ~70-character string a batch; ``float``/``str``
are not gc-tracked, so gc object counts stay flat), fixed +0.0 MiB;
~2.3-2.8 ms a batch (29-35 s).
"""
import collections
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/bstriner/keras-tqdm/issues/29"
SLICE = "holdout6"
STEPS = 12000          # batches, one epoch
BATCH = 32
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["float", "list", "str", "dict"],
              "holder_any": ["values", "postfixes", "TqdmLikeProgress"]},
    "fixed": {"verdict_not": "leak"},
}


class TqdmLikeProgress(keras.callbacks.Callback):
    def __init__(self, running_sums):
        super().__init__()
        self.running_sums = running_sums
        self.shown = ""

    def on_epoch_begin(self, epoch, logs=None):
        self.values = collections.defaultdict(list)
        self.sums = collections.defaultdict(float)
        self.count = 0
        self.postfixes = []

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        self.count += 1
        if self.running_sums:
            for k, v in logs.items():
                self.sums[k] += float(v)
            means = {k: s / self.count for k, s in self.sums.items()}
        else:
            for k, v in logs.items():
                self.values[k].append(float(v))                 # every batch, for the running mean
            means = {k: float(np.mean(vs[-50:])) for k, vs in self.values.items()}
        postfix = "batch %d: " % batch + " - ".join("%s: %.4f" % kv for kv in means.items())
        if self.running_sums:
            self.shown = postfix
        else:
            self.postfixes.append(postfix)


def _fit(logdir, steps, running_sums):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, 32)).astype(np.float32)
    y = (x[:, :4].sum(1) > 0).astype(np.int64)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096, seed=0).repeat().batch(BATCH)
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0,
              callbacks=[TqdmLikeProgress(running_sums), tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, running_sums=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, running_sums=True)
