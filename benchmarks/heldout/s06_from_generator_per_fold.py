"""``Dataset.from_generator`` rebuilt for every fold, closing over the fold's data.

Source: tensorflow/tensorflow#57690 "Datasets created by `from_generator` do not
properly release objects" (see also #37653).
Summary: cross-validation code builds a new ``from_generator`` dataset per fold
whose generator closes over an object holding the fold's arrays; the objects are
never released (``__del__`` never runs) and memory grows with every fold. The
data is already in memory, so the fix is to build the per-fold dataset with
``from_tensor_slices`` (no Python generator registered with the runtime).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/tensorflow/tensorflow/issues/57690"
SLICE = "holdout"
STEPS = 300
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["FoldData", "ndarray", "numpy", "KeyedRef", "generator"]},
    "fixed": {"verdict_not": "leak"},
}


class FoldData:
    """The fold's features (512 x 16 float32, 32 KiB)."""

    def __init__(self, rng):
        self.x = rng.standard_normal((512, 16), dtype=np.float32)


def _build_from_generator(obj):
    def _generator():
        for row in obj.x:
            yield row
    return tf.data.Dataset.from_generator(
        _generator, output_signature=tf.TensorSpec(shape=(16,), dtype=tf.float32)).batch(64)


def _build_from_slices(obj):
    return tf.data.Dataset.from_tensor_slices(obj.x).batch(64)


def _loop(monitor, steps, build):
    rng = np.random.default_rng(0)
    tf.random.set_seed(0)
    w = tf.Variable(tf.random.normal((16, 1), stddev=0.1))
    for step in range(steps):                 # one (short) fold per step
        dataset = build(FoldData(rng))
        for batch in dataset.take(2):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(batch, w)))
            w.assign_sub(0.01 * tape.gradient(loss, w))
        monitor.sample(step)


def leaky(monitor, steps):
    _loop(monitor, steps, _build_from_generator)


def fixed(monitor, steps):
    _loop(monitor, steps, _build_from_slices)
