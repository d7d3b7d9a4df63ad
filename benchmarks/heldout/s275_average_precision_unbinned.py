"""A multi-label tagger is trained with a ``tf.function`` step and logs the batch average precision after every step by calling its metric object on the batch (``ap(pred, target)``); the metric is written like torchmetrics' ``AveragePrecision`` with ``thresholds=None``, whose forward call returns the batch value but also appends the batch's predictions and targets to the metric's list states, which nothing ever resets, so every batch's tensors stay (TensorFlow ``tf.function``; large: ~48 KiB and 2 eager tensors a step; steps of ~5-8 ms).

Source: Lightning-AI/torchmetrics issue #3294 "Memory Leak in
AveragePrecision": "The gpu memory usage keeps growing when using
AveragePrecision. This doesn't happen with other metrics (Accuracy and
Precision)" (the repro calls ``metric(pred, target)`` in a loop and never
resets). The library's documented answer, from the constant-memory work of
issue #95 "Constant-memory implementation of precision-recall related
metrics": "Setting the thresholds argument to None will activate the
non-binned version that uses memory of size O(n_samples) whereas setting
the thresholds argument to either an integer, list or a 1d tensor will use a
binned version that uses memory of size O(n_thresholds) (constant memory)".
Fix used here: ``thresholds=200``, the binned state (per-threshold TP / FP /
FN counts in one ``tf.Variable``), updated in place.
Summary: the metric is a stand-in with the torchmetrics shape (``update``
appends to ``preds`` / ``target`` lists, or adds to the binned counts;
``compute``; ``__call__`` computes the batch value and also updates the
global state). The model is a Keras 96-256-128-16 multi-label tagger
(sigmoid outputs, Adam) on batches of 256 synthetic samples; the batch AP is
averaged over the 16 labels from exact per-batch sorting.

Here: 4,000 steps. The fixed metric is binned (``thresholds=200``).
"""
import collections
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/Lightning-AI/torchmetrics/issues/3294"
SLICE = "holdout23"
STEPS = 4000
BATCH = 256
FEATURES = 96
LABELS = 16
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "tensorflow", "list"],
              "holder_any": ["preds", "target", "AveragePrecision"]},
    "fixed": {"verdict_not": "leak"},
}


@tf.function
def _batch_ap(pred, target):
    order = tf.argsort(pred, axis=0, direction="DESCENDING")
    t = tf.cast(tf.transpose(tf.gather(tf.transpose(target), tf.transpose(order), batch_dims=1)), tf.float32)
    tp = tf.cumsum(t, axis=0)
    precision = tp / tf.cast(tf.range(1, tf.shape(t)[0] + 1), tf.float32)[:, None]
    ap = tf.reduce_sum(precision * t, axis=0) / tf.maximum(tf.reduce_sum(t, axis=0), 1.0)
    return tf.reduce_mean(ap)


class AveragePrecision:
    def __init__(self, num_labels, thresholds=None):
        self.thresholds = thresholds
        if thresholds is None:
            self.preds = []
            self.target = []
        else:
            self.edges = tf.linspace(0.0, 1.0, thresholds)
            self.confmat = tf.Variable(tf.zeros((thresholds, num_labels, 3)), trainable=False)

    def update(self, pred, target):
        if self.thresholds is None:
            self.preds.append(pred)
            self.target.append(target)
        else:
            above = tf.cast(pred[None, :, :] >= self.edges[:, None, None], tf.float32)
            t = tf.cast(target, tf.float32)[None]
            self.confmat.assign_add(tf.stack([tf.reduce_sum(above * t, 1), tf.reduce_sum(above * (1 - t), 1),
                                              tf.reduce_sum((1 - above) * t, 1)], axis=-1))

    def __call__(self, pred, target):
        self.update(pred, target)                       # forward also accumulates the global state
        return _batch_ap(pred, target)


def _run(monitor, steps, thresholds):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    proj = rng.standard_normal((FEATURES, LABELS)).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(128, activation="relu"), keras.layers.Dense(LABELS)])
    opt = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return tf.sigmoid(logits)

    ap = AveragePrecision(LABELS, thresholds=thresholds)
    batch_ap = collections.deque(maxlen=100)
    for step in range(steps):
        x = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
        y = ((x @ proj + rng.standard_normal((BATCH, LABELS))) > 1.0).astype(np.int32)
        pred = train_step(tf.constant(x), tf.constant(y, tf.float32))
        batch_ap.append(float(ap(pred, tf.constant(y))))
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, thresholds=None)


def fixed(monitor, steps):
    _run(monitor, steps, thresholds=200)
