"""A cross-batch memory (XBM) for metric learning is switched on after the warm-up (at 40 % of the run) and implemented by concatenating each batch's embeddings onto the memory tensor, with no cap, so the memory bank held by the loss object grows by a batch of embeddings every step (``tf.function`` train step, eager memory update; late onset).

Source: KevinMusgrave/pytorch-metric-learning#330 "erase XBM memory after
n iteration + set warmup epochs" ("once the queue is filled, the oldest
embeddings are replaced with the newest embeddings at each iteration";
the paper's warm-up: "during warmup they simply don't use the memory
queue") and #421 (RAM growing during training with a memory queue; the
maintainer: "I don't think there is a memory leak in CrossBatchMemory,
because it has a fixed size memory, and the input tensors are always
detached before being added to memory"). Fix, the library's design: a
fixed-size ring buffer (``memory_size`` rows, a write pointer that wraps).
Summary: an embedding network is trained with a contrastive loss against
the current batch and, after the warm-up, against a memory of earlier
batches' embeddings. The home-grown ``CrossBatchMemory`` keeps
``self.embeddings`` / ``self.labels`` and adds each batch with
``tf.concat([self.embeddings, emb], 0)``; the intended trim to
``memory_size`` was left out, so the bank (and the similarity matrix
computed against it each step) grows for the rest of the run.

Here: batches of 32 x 64 float32 inputs, a 64-128-32 embedding MLP, a
softmax contrastive loss; the memory is meant to hold 1,024 rows. The
fixed twin writes into a ``tf.Variable`` ring buffer of 1,024 rows.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky
565.5 / 567.7 / 687.3 MiB RSS at 20 % / 40 % / end (the onset is at 40 %:
+119.6 MiB over the last 3,000 steps, ~40 KiB a step; the bank itself is
12 MiB at the end, the rest is the growing similarity matrices and their
gradients as the allocator keeps larger blocks) with gc objects 324,920 /
324,924 / 343,751 (a few relaxed retraces), the step time growing from
~0.3 ms to ~6 ms with the bank (19.5 s for 5,000 steps). Fixed 566.0 /
568.8 / 572.7 MiB (the ring buffer and its traces, filled in the first
32 steps after the onset), objects 324,930 / 324,934 / 327,873; ~1 ms a
step (4.8 s).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/KevinMusgrave/pytorch-metric-learning/issues/330"
SLICE = "holdout10"
STEPS = 5000
WARMUP = 0.4            # the memory is used after this fraction of the run
MEMORY_SIZE = 1024
BATCH = 32
FEATURES = 64
EMBED = 32
CLASSES = 20
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "native", "CrossBatchMemory"],
              "holder_any": ["embeddings", "CrossBatchMemory", "xbm", "memory"]},
    "fixed": {"verdict_not": "leak"},
}


class CrossBatchMemory:
    def __init__(self, ring):
        self.ring = ring
        if ring:
            self.embeddings = tf.Variable(tf.zeros([MEMORY_SIZE, EMBED]), trainable=False)
            self.labels = tf.Variable(tf.fill([MEMORY_SIZE], -1), trainable=False)
            self.ptr = 0
            self.filled = 0
        else:
            self.embeddings = tf.zeros([0, EMBED])
            self.labels = tf.zeros([0], tf.int32)

    def add(self, emb, labels):
        emb = tf.stop_gradient(emb)
        if self.ring:                                       # the fix: a fixed-size ring buffer
            idx = (self.ptr + tf.range(BATCH)) % MEMORY_SIZE
            self.embeddings.scatter_nd_update(idx[:, None], emb)
            self.labels.scatter_nd_update(idx[:, None], labels)
            self.ptr = (self.ptr + BATCH) % MEMORY_SIZE
            self.filled = min(MEMORY_SIZE, self.filled + BATCH)
        else:                                               # the leak: concatenated, never trimmed
            self.embeddings = tf.concat([self.embeddings, emb], 0)
            self.labels = tf.concat([self.labels, labels], 0)

    def get(self):
        if self.ring:
            return tf.convert_to_tensor(self.embeddings)[:self.filled], tf.convert_to_tensor(self.labels)[:self.filled]
        return self.embeddings, self.labels


def _train(monitor, steps, ring):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(EMBED)])
    optimizer = keras.optimizers.Adam(1e-3)

    def _loss(emb, y, mem, mem_y):
        sim = tf.matmul(emb, mem, transpose_b=True) / 0.1
        pos = tf.cast(tf.equal(y[:, None], mem_y[None, :]), tf.float32)
        logp = tf.nn.log_softmax(sim, axis=1)
        return -tf.reduce_mean(tf.reduce_sum(logp * pos, 1) / tf.maximum(tf.reduce_sum(pos, 1), 1.0))

    @tf.function(reduce_retracing=True)
    def train_step(x, y, mem, mem_y):
        with tf.GradientTape() as tape:
            emb = tf.math.l2_normalize(model(x, training=True), axis=1)
            loss = _loss(emb, y, emb, y)
            loss += _loss(emb, y, tf.concat([emb, mem], 0), tf.concat([y, mem_y], 0))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return emb, loss

    xbm = CrossBatchMemory(ring)
    warmup = int(steps * WARMUP)
    empty, empty_y = tf.zeros([0, EMBED]), tf.zeros([0], tf.int32)
    for step in range(steps):
        y = rng.integers(0, CLASSES, BATCH).astype(np.int32)
        x = centers[y] + rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
        y = tf.constant(y)
        mem, mem_y = xbm.get() if step >= warmup else (empty, empty_y)
        emb, _ = train_step(tf.constant(x), y, mem, mem_y)
        if step >= warmup:
            xbm.add(emb, y)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, ring=False)


def fixed(monitor, steps):
    _train(monitor, steps, ring=True)
