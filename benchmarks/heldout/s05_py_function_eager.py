"""``tf.py_function`` called eagerly in the input/augmentation path.

Source: tensorflow/tensorflow#35010 "Memory leak with tf.py_function in eager mode
using TF 2.0" (mayou36's reduced gist; also #35084, #61344).
Summary: a numpy augmentation wrapped with ``tf.py_function`` and called once per
batch keeps memory growing: each call registers the Python function (and a tape
cache entry) that is never released. The thread found ``tf.numpy_function``
(no tape cache) does not leak, and switched to it.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/tensorflow/tensorflow/issues/35010"
SLICE = "tune"
STEPS = 1200
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerFunc", "KeyedRef", "py_func"]},
    "fixed": {"verdict_not": "leak"},
}


def _augment_np(x):
    return np.cos(x).astype(np.float32)


def _loop(monitor, steps, wrap):
    rng = np.random.default_rng(0)
    w = tf.Variable(rng.standard_normal((256, 8), dtype=np.float32) * 0.05)
    for step in range(steps):
        batch = tf.constant(rng.random((16, 256), dtype=np.float32))
        aug = wrap(batch)
        aug = tf.reshape(aug, (16, 256))
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(aug, w)))
        w.assign_sub(0.01 * tape.gradient(loss, w))
        monitor.sample(step)


def leaky(monitor, steps):
    _loop(monitor, steps, lambda b: tf.py_function(func=_augment_np, inp=[b], Tout=tf.float32))


def fixed(monitor, steps):
    _loop(monitor, steps, lambda b: tf.numpy_function(func=_augment_np, inp=[b], Tout=tf.float32))
