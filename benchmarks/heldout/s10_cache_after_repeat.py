"""In-memory ``Dataset.cache()`` placed after ``repeat()``.

Source: tensorflow/tensorflow#27128 "dataset memory cache runs out of memory"
(with the tf.data performance guide's advice on where ``cache`` goes).
Summary: ``tf.data`` in-memory cache keeps every element it has seen; put after
``repeat()`` it caches an endless stream and grows until the machine runs out of
memory. Fix: cache the finite dataset and repeat the cache
(``.cache().repeat()``): memory grows during the first epoch while the cache
fills, then stays flat.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/tensorflow/tensorflow/issues/27128"
SLICE = "holdout"
STEPS = 2000
EXPECT = {
    # Cached elements live in TensorFlow's own buffers: no Python object grows.
    "leaky": {"verdict": "leak", "culprit_any": ["native", "bytes_in_use", "rss"]},
    "fixed": {"verdict_not": "leak"},
}


def _decode(row):
    # stands in for an expensive decode / preprocessing map
    return tf.nn.l2_normalize(row * 2.0 + 1.0)


def _source():
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((2048, 256), dtype=np.float32)    # 2 MiB, one epoch = 256 steps
    return tf.data.Dataset.from_tensor_slices(rows).map(_decode)


def _loop(monitor, steps, ds):
    tf.random.set_seed(0)
    w = tf.Variable(tf.random.normal((256, 4), stddev=0.05))
    it = iter(ds)
    for step in range(steps):
        batch = next(it)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(batch, w)))
        w.assign_sub(0.01 * tape.gradient(loss, w))
        monitor.sample(step)


def leaky(monitor, steps):
    _loop(monitor, steps, _source().repeat().cache().batch(8))


def fixed(monitor, steps):
    _loop(monitor, steps, _source().cache().repeat().batch(8))
