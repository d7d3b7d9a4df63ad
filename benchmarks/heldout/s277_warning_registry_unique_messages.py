"""A ``tf.function`` training script turns warnings on (``warnings.simplefilter("default")``, to see deprecations) and its data loader warns about every clipped outlier with a message that names the shard, row and count; under the ``default`` action the ``warnings`` machinery records each distinct ``(message, category, lineno)`` in the calling module's ``__warningregistry__`` so that it is shown once, and since every message is distinct, the registry gains an entry (a key tuple with its message string) for every warning (TensorFlow ``tf.function``; ~0.8 KiB and 8 objects a step, four warnings a step).

Source: python/cpython issue #71722 (bpo-27535) "Ignored ResourceWarning
warnings leak memory in warnings registries" (closed): a program warning
with a new message each time (there, ``ResourceWarning`` naming each file)
grew without bound because every distinct message was recorded in
``__warningregistry__``; the fix (PRs #4489, #4502 and backports) stopped
the ``ignore`` action from recording anything, while the ``default`` and
``module`` actions still record each distinct message by design (measured
here on 3.11.7: 50,000 distinct default-action warnings keep 50,000 registry
entries, ~10 MiB). Fix used here (the one the fix makes cheap): the loader's
warning category is ignored (``warnings.filterwarnings("ignore",
category=DataQualityWarning)``) and the clipped counts are summed into a
per-epoch report that is written and cleared every epoch.
Summary: the loader clips feature values beyond +-6 (four injected spikes a
batch, plus the rare natural one) and warns ``"clipped %d values in shard-%05d.npz row %d"``
(``stacklevel=1``, so the registry is this module's). Warnings go to a log
file through ``logging.captureWarnings(True)``. The model is a Keras
64-128-64-10 classifier trained with Adam on batches of 128; an epoch is
400 steps.

Here: 12,000 steps. The fixed script ignores the category and reports per epoch.
"""
import collections
import logging
import os
import tempfile
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/python/cpython/issues/71722"
SLICE = "holdout23"
STEPS = 12000
PER_EPOCH = 400
BATCH = 128
FEATURES = 64
CLASSES = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["str", "tuple", "dict"],
              "holder_any": ["__warningregistry__", "warningregistry"]},
    "fixed": {"verdict_not": "leak"},
}


class DataQualityWarning(UserWarning):
    pass


def _clip_outliers(x, shard, rows, report):
    clipped = np.abs(x) > 6.0
    counts = clipped.sum(axis=1)
    for i in np.flatnonzero(counts):
        n = int(counts[i])
        if report is None:
            warnings.warn("clipped %d values in shard-%05d.npz row %d" % (n, shard, int(rows[i])),
                          DataQualityWarning, stacklevel=1)
        else:
            report[shard] += n
    return np.clip(x, -6.0, 6.0)


def _run(monitor, steps, fixed_warnings):
    warnings.simplefilter("default")
    if fixed_warnings:
        warnings.filterwarnings("ignore", category=DataQualityWarning)
    tmp = tempfile.mkdtemp(prefix="s277_")
    handler = logging.FileHandler(os.path.join(tmp, "warnings.log"))
    wlog = logging.getLogger("py.warnings")
    wlog.addHandler(handler)
    wlog.propagate = False
    logging.captureWarnings(True)
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(CLASSES)])
    opt = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    report = collections.Counter() if fixed_warnings else None
    losses = collections.deque(maxlen=100)
    try:
        for step in range(steps):
            y = rng.integers(0, CLASSES, BATCH)
            x = (centers[y] + rng.standard_normal((BATCH, FEATURES))).astype(np.float32)
            spikes = rng.choice(BATCH, 4, replace=False)
            x[spikes, rng.integers(0, FEATURES, 4)] = rng.choice([-1, 1], 4) * rng.uniform(7, 10, 4)
            rows = step * BATCH + np.arange(BATCH)
            x = _clip_outliers(x, step // 50, rows, report)
            losses.append(float(train_step(x, y.astype(np.int32))))
            if report is not None and step % PER_EPOCH == PER_EPOCH - 1:
                wlog.warning("epoch %d: clipped %d values in %d shards", step // PER_EPOCH,
                             sum(report.values()), len(report))
                report.clear()
            monitor.sample(step)
    finally:
        logging.captureWarnings(False)
        wlog.removeHandler(handler)
        handler.close()
        for name in os.listdir(tmp):
            os.remove(os.path.join(tmp, name))
        os.rmdir(tmp)


def leaky(monitor, steps):
    _run(monitor, steps, fixed_warnings=False)


def fixed(monitor, steps):
    _run(monitor, steps, fixed_warnings=True)
