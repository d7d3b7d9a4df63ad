"""A calibration callback scores the held-out set at every epoch end with freshly constructed Keras metrics (``AUC``, ``PrecisionAtRecall``, ``RecallAtPrecision``); every new metric creates uniquely named variables, and TensorFlow's eager context caches a ``VarHandleOp`` kernel per unique variable name, so native memory steps up once an epoch while no Python object survives (``model.fit``; grows in bursts, native memory only).

Source: tensorflow/tensorflow#17590 "Leak when creating many
tf.layers.Conv2D with tf.eager" ("each creation of a tf.layers.Conv2D is
slower than the one before ... over time entire process slows down";
allenlavoie: "Looks like it's due to some overzealous caching"), and
the kernel-cache half of tensorflow/tensorflow#40171 in PR #42377
("[40171] Add VarHandleOp to set of kernels not to cache": "This new
version of the patch filters out ``VarHandleOp`` operations from the set
of operations whose kernels are cached inside ``EagerExecutor``";
allenlavoie: "the fix for tf.Variable was to always use a fixed
shared_name to indicate an anonymous resource. The reason something is
still leaking is this line"). On TF 2.21 a ``tf.Variable`` with a new
name still costs ~35 KiB of native memory that is never returned, and
Keras 3 names every metric variable by its owner's unique path
(``auc_17/true_positives``). Fix: build the metrics once in the
callback's ``__init__`` and call ``reset_state()`` at each epoch end.
Summary: a binary classifier is trained with ``model.fit``; its
``CalibrationReport`` callback predicts a 2,048-sample held-out set at
each epoch end and computes ROC AUC, precision at 90 % recall and recall
at 90 % precision, each from a metric built on the spot: 12 new
variables (4 x 200 thresholds per metric) an epoch, ~0.4 MiB of native
memory each epoch.

Here: 32 features, a 32-64-1 Keras MLP, 40 batches of 32 an epoch, 150
epochs. The fixed twin's callback owns three metrics and resets them.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21
/ Keras 3.15 / Python 3.11; ``LeakCallback`` replaced by a stub
callback): leaky 579.0 / 591.8 / 629.5 MiB RSS at 20 % / 40 % / end
(~0.42 MiB an epoch, at each epoch end) with gc objects flat (328,831 /
328,843 / 328,889); fixed 568.0 / 569.6 / 570.5 MiB, objects 328,967 /
328,966 / 329,028; ~3 ms a batch leaky (18.2 s for 6,000 batches, the
epoch ends slowed by building the metrics), ~2 ms fixed (12.0 s).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/tensorflow/tensorflow/issues/17590"
SLICE = "holdout11"
STEPS = 6000           # batches; 40 per epoch, 150 epochs
STEPS_PER_EPOCH = 40
BATCH = 32
FEATURES = 32
HELD_OUT = 2048
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "AUC", "Variable", "kernel"]},
    "fixed": {"verdict_not": "leak"},
}


def _metrics():
    return [keras.metrics.AUC(num_thresholds=200), keras.metrics.PrecisionAtRecall(0.9, num_thresholds=200),
            keras.metrics.RecallAtPrecision(0.9, num_thresholds=200)]


class CalibrationReport(keras.callbacks.Callback):
    def __init__(self, x, y, reuse):
        super().__init__()
        self.x, self.y, self.reuse = x, y, reuse
        self.metrics_ = _metrics() if reuse else None
        self.history = []

    def on_epoch_end(self, epoch, logs=None):
        probs = tf.sigmoid(self.model(self.x, training=False))[:, 0]
        if self.reuse:
            metrics = self.metrics_
            for m in metrics:
                m.reset_state()                            # the fix: one set of metrics, reset per epoch
        else:
            metrics = _metrics()                           # the leak: new named variables every epoch
        for m in metrics:
            m.update_state(self.y, probs)
        self.history.append(tuple(float(m.result()) for m in metrics))


def _fit(logdir, steps, reuse):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    w = rng.normal(size=(FEATURES,)).astype(np.float32)
    n = STEPS_PER_EPOCH * BATCH
    x = rng.standard_normal((n, FEATURES), dtype=np.float32)
    y = (x @ w + rng.normal(size=n) > 0).astype(np.float32)
    xv = rng.standard_normal((HELD_OUT, FEATURES), dtype=np.float32)
    yv = (xv @ w + rng.normal(size=HELD_OUT) > 0).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss=keras.losses.BinaryCrossentropy(from_logits=True))
    epochs = max(1, steps // STEPS_PER_EPOCH)
    model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=True, verbose=0,
              callbacks=[CalibrationReport(xv, yv, reuse), tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, reuse=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, reuse=True)
