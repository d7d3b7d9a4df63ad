"""Variable-length documents fed one per batch to a ``tf.function`` train step.

Source: tensorflow/tensorflow#38002 "Is retracing inevitable when working with
variously-sized inputs?" (answer in tensorflow/tensorflow#49151 and #38561).
Summary: token classification with a Conv1D model on single documents of
different lengths; each new length retraces ``train`` ("5 out of the last 5 calls
triggered tf.function retracing") and host memory keeps growing. The advice in
the threads: give the function an ``input_signature`` with ``None`` for the
variable dimension so a single trace covers every length.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/tensorflow/tensorflow/issues/38002"
SLICE = "holdout"
# every step is a new trace (~70 ms on 2 shared cores): 200 steps keep the run in budget.
STEPS = 200
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["retracing", "traces", "ConcreteFunction"]},
    "fixed": {"verdict_not": "leak"},
}

FEATURES, CLASSES = 8, 3


def _setup():
    keras.utils.set_random_seed(0)
    inp = keras.Input(shape=(None, FEATURES))
    lay = keras.layers.Conv1D(16, 5, padding="same", activation="relu")(inp)
    out = keras.layers.Conv1D(CLASSES, 5, padding="same", activation="softmax")(lay)
    model = keras.Model(inp, out)
    loss_object = keras.losses.CategoricalCrossentropy()
    optimizer = keras.optimizers.SGD(0.01)
    return model, loss_object, optimizer


def _documents(steps):
    rng = np.random.default_rng(0)
    for _ in range(steps):
        n = int(rng.integers(50, 1500))
        x = rng.standard_normal((1, n, FEATURES), dtype=np.float32)
        y = np.eye(CLASSES, dtype=np.float32)[rng.integers(0, CLASSES, size=(1, n))]
        yield tf.constant(x), tf.constant(y)


def _make_train(model, loss_object, optimizer, signature):
    def train(x, y):
        with tf.GradientTape() as g:
            pred = model(x, training=True)
            loss = loss_object(y, pred)
        gradients = g.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss
    if signature:
        return tf.function(train, input_signature=[
            tf.TensorSpec((1, None, FEATURES), tf.float32),
            tf.TensorSpec((1, None, CLASSES), tf.float32)])
    return tf.function(train)


def leaky(monitor, steps):
    train = _make_train(*_setup(), signature=False)
    for step, (x, y) in enumerate(_documents(steps)):
        train(x, y)
        monitor.sample(step)


def fixed(monitor, steps):
    train = _make_train(*_setup(), signature=True)
    for step, (x, y) in enumerate(_documents(steps)):
        train(x, y)
        monitor.sample(step)
