"""``tf.function`` train step called with the Python step counter.

Source: tensorflow/tensorflow#31842 "Tensorflow2.0 Training OOM when tf.function
retraces excessively".
Summary: ``train_step(self, x, step, ...)`` is a ``tf.function`` that receives the
global step as a plain Python int (used for summaries / schedules), so every call
has a new signature and is traced again; CPU memory grows until the process is
killed. The fix from the thread: pass tensors (``tf.constant(step)``), not Python
numbers, so one trace serves every step.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/tensorflow/tensorflow/issues/31842"
SLICE = "tune"
STEPS = 300
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["retracing", "traces", "ConcreteFunction", "train_step"]},
    "fixed": {"verdict_not": "leak"},
}


class Trainer:
    def __init__(self):
        tf.random.set_seed(0)
        self.w1 = tf.Variable(tf.random.normal((32, 64), stddev=0.1))
        self.w2 = tf.Variable(tf.random.normal((64, 1), stddev=0.1))
        self.vars = [self.w1, self.w2]
        self.lr = 0.01

    @tf.function
    def train_step(self, x, step, grad_clip=True, clip_value=1.0):
        inputs, targets = x[:, :-1], x[:, -1:]
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(inputs, self.w1))
            pred = tf.matmul(h, self.w2)
            loss = tf.reduce_mean(tf.square(pred - targets))
        grads = tape.gradient(loss, self.vars)
        if grad_clip:
            grads = [tf.clip_by_value(g, -clip_value, clip_value) for g in grads]
        # warm-up schedule driven by the step
        lr = self.lr * tf.minimum(1.0, tf.cast(step + 1, tf.float32) / 100.0)
        for v, g in zip(self.vars, grads):
            v.assign_sub(lr * g)
        return loss


def _batches(steps):
    rng = np.random.default_rng(0)
    for _ in range(steps):
        yield tf.constant(rng.standard_normal((16, 33), dtype=np.float32))


def leaky(monitor, steps):
    t = Trainer()
    for step, x in enumerate(_batches(steps)):
        t.train_step(x, step)                      # Python int: a new trace per step
        monitor.sample(step)


def fixed(monitor, steps):
    t = Trainer()
    for step, x in enumerate(_batches(steps)):
        t.train_step(x, tf.constant(step, tf.int64))
        monitor.sample(step)
