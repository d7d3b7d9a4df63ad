"""Passing a bound method to a ``tf.function`` epoch loop.

Source: tensorflow/tensorflow#31175 "TF2.0 - memory leak caused by autograph
retracing due to bound method argument".
Summary: a custom model factors its train step out into a method and calls a
``tf.function`` epoch loop as ``train_epoch(model.step, dataset)``; since
``model.step is not model.step`` (a new bound-method object on every attribute
access), the whole autograph epoch loop is retraced on every call and memory
grows. Fix from the thread: take the bound method once (``step_fn = model.step``)
and pass that same object every time.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/tensorflow/tensorflow/issues/31175"
SLICE = "holdout"
# every call retraces the epoch loop (~60 ms on 2 shared cores): 250 calls keep the run in budget.
STEPS = 250
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["retracing", "traces", "ConcreteFunction", "train_epoch"]},
    "fixed": {"verdict_not": "leak"},
}


class Model:
    def __init__(self):
        tf.random.set_seed(0)
        self.w = tf.Variable(tf.random.normal((64, 16), stddev=0.1))
        self.b = tf.Variable(tf.zeros((16,)))

    def step(self, batch):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(batch, self.w) + self.b))
        gw, gb = tape.gradient(loss, [self.w, self.b])
        self.w.assign_sub(0.01 * gw)
        self.b.assign_sub(0.01 * gb)
        return loss


@tf.function
def train_epoch(step_fn, data):
    total = tf.constant(0.0)
    for batch in data:            # autograph loop over the epoch's batches
        total += step_fn(batch)
    return total


def _epochs(steps):
    rng = np.random.default_rng(0)
    for _ in range(steps):
        yield tf.constant(rng.standard_normal((2, 16, 64), dtype=np.float32))


def leaky(monitor, steps):
    model = Model()
    for step, data in enumerate(_epochs(steps)):
        train_epoch(model.step, data)          # new bound method object each call
        monitor.sample(step)


def fixed(monitor, steps):
    model = Model()
    step_fn = model.step                        # one object, reused
    for step, data in enumerate(_epochs(steps)):
        train_epoch(step_fn, data)
        monitor.sample(step)
