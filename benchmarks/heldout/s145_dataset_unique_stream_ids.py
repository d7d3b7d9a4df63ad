"""A streaming ``tf.data`` pipeline drops re-crawled duplicates with ``Dataset.unique()`` on the example ids before looking up their features; ``unique`` keeps every element it has ever returned in a hash set inside the iterator, so on a stream of mostly new ids that set grows by an id a sample for the whole run while no Python object grows (``tf.function`` train step; native memory only).

Source: tensorflow/tensorflow PR #50056 "[tf.data] graduate unique API
from experimental to tf.data.Dataset" (``Dataset.unique`` "discards
duplicate elements", which it can only do by remembering every element
it has produced, for as long as the iterator lives). Fix used here: de-duplicate
per crawl shard (``unique`` inside ``interleave``, one shard's ids at a
time), so each shard's set is freed when the shard is exhausted (a
saw-tooth).
Summary: a click-through model trains on a stream of example ids in
which 1 in 8 is a re-crawl of a recent id; ids are made unique, mapped
to hashed features and batched into a ``tf.function`` step.

Here: shards of 4,096 ids, batches of 64, a 32-16-1 model on hashed
features; the leaky pipeline applies ``unique()`` to the flattened
stream. The fixed twin applies it per shard inside ``interleave``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; a do-nothing ``monitor.sample``): leaky
564.9 / 581.3 / 595.7 / 608.4 / 623.8 MiB RSS at 20 / 40 / 60 / 80 % /
end (~12 KiB a step, 64 ids a step in the iterator's set) with gc
objects flat (317,927 -> 317,931), 11.6 s for 6,000 steps; fixed 552.0
/ 554.6 / 554.6 / 554.6 / 554.6 MiB (one shard's set at a time), objects
flat (317,960 -> 317,964), 9.9 s.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/tensorflow/tensorflow/pull/50056"
SLICE = "holdout12"
STEPS = 6000
BATCH = 64
SHARD = 4096
FEATURES = 32
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "unique", "dataset", "iterator"]},
    "fixed": {"verdict_not": "leak"},
}


def _shard_ids(shard):
    base = shard * SHARD
    ids = tf.range(base, base + SHARD, dtype=tf.int64)
    recrawl = tf.maximum(ids - 1000, 0)                      # 1 in 8 ids repeats a recent one
    return tf.where(ids % 8 == 0, recrawl, ids)


def _features(example_id):
    h = tf.strings.to_hash_bucket_fast(tf.strings.as_string(example_id), 1 << 20)
    seeds = tf.stack([h, example_id % 7])
    x = tf.random.stateless_normal([FEATURES], seed=seeds)
    y = tf.cast(tf.reduce_sum(x[:4]) > 0, tf.float32)
    return x, y


def _dataset(per_shard):
    shards = tf.data.Dataset.range(10 ** 6)
    if per_shard:                                            # the fix: one shard's set at a time
        ids = shards.interleave(lambda s: tf.data.Dataset.from_tensor_slices(_shard_ids(s)).unique(),
                                cycle_length=1)
    else:                                                    # the leak: one set for the whole stream
        ids = shards.flat_map(lambda s: tf.data.Dataset.from_tensor_slices(_shard_ids(s))).unique()
    return ids.map(_features).batch(BATCH).prefetch(2)


def _train(monitor, steps, per_shard):
    w1 = tf.Variable(tf.random.stateless_normal((FEATURES, 16), seed=(0, 1)) * 0.2)
    w2 = tf.Variable(tf.zeros((16, 1)))
    opt = tf.keras.optimizers.SGD(0.05)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)[:, 0]
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, logits))
        opt.apply_gradients(zip(tape.gradient(loss, [w1, w2]), [w1, w2]))
        return loss

    it = iter(_dataset(per_shard))
    for step in range(steps):
        x, y = next(it)
        train_step(x, y)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, per_shard=False)


def fixed(monitor, steps):
    _train(monitor, steps, per_shard=True)
