"""One persistent ``GradientTape`` kept and reused for the whole training.

Source: sql-machine-learning/elasticdl#1144 "Need to use non-persistent gradient
tape".
Summary: ElasticDL workers created one persistent gradient tape, handed it to the
embedding layer and used it for the whole training process; in eager mode a
persistent tape keeps everything it recorded until it is deleted, so every
step's intermediates stay alive. Fix: a fresh, non-persistent tape per step,
which frees its resources when ``gradient`` is called.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/sql-machine-learning/elasticdl/issues/1144"
SLICE = "holdout"
STEPS = 1500
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "tensors", "GradientTape", "tape"]},
    "fixed": {"verdict_not": "leak"},
}


class Worker:
    def __init__(self):
        tf.random.set_seed(0)
        self.embedding = tf.Variable(tf.random.normal((1000, 32), stddev=0.05))
        self.dense = tf.Variable(tf.random.normal((32, 1), stddev=0.1))
        self.rng = np.random.default_rng(0)

    def batch(self):
        ids = tf.constant(self.rng.integers(0, 1000, size=(64,)), tf.int32)
        y = tf.constant(self.rng.random((64, 1), dtype=np.float32))
        return ids, y

    def forward(self, ids, y):
        emb = tf.gather(self.embedding, ids)
        pred = tf.matmul(tf.tanh(emb), self.dense)
        return tf.reduce_mean(tf.square(pred - y))

    def apply(self, grads):
        for v, g in zip((self.embedding, self.dense), grads):
            v.assign_sub(0.01 * tf.convert_to_tensor(g))


def leaky(monitor, steps):
    worker = Worker()
    tape = tf.GradientTape(persistent=True)   # created once, used for all of training
    for step in range(steps):
        ids, y = worker.batch()
        with tape:
            loss = worker.forward(ids, y)
        worker.apply(tape.gradient(loss, [worker.embedding, worker.dense]))
        monitor.sample(step)


def fixed(monitor, steps):
    worker = Worker()
    for step in range(steps):
        ids, y = worker.batch()
        with tf.GradientTape() as tape:
            loss = worker.forward(ids, y)
        worker.apply(tape.gradient(loss, [worker.embedding, worker.dense]))
        monitor.sample(step)
