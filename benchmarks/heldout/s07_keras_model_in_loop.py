"""Building throwaway Keras models in a loop (hyper-parameter / variant search).

Source: tensorflow/tensorflow#30324 "Memory leak in eager mode when creating keras
model in loop" (also keras-team/keras#9151 and #2102, where fchollet recommends
``K.clear_session()`` "if you ever create models inside a loop").
Summary: a script builds a new small model per variant and evaluates it on a
batch; process memory climbs with every model although each one is dropped.
Fix: call ``keras.backend.clear_session()`` at the start of each iteration (the
Keras docstring's own example; ``free_memory=False`` to skip the costly
``gc.collect`` in a short loop).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/tensorflow/tensorflow/issues/30324"
SLICE = "tune"
STEPS = 400
EXPECT = {
    # No Python type grows (the models are freed); Keras/TF runtime state does.
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss"]},
    "fixed": {"verdict_not": "leak"},
}


def _variant(step, x):
    units = 8 + (step % 5) * 4
    model = keras.Sequential([
        keras.Input(shape=(10,)),
        keras.layers.Dense(units, activation="relu"),
        keras.layers.Dense(1),
    ])
    return float(tf.reduce_mean(model(x)))


def leaky(monitor, steps):
    x = np.random.default_rng(0).random((32, 10), dtype=np.float32)
    for step in range(steps):
        _variant(step, x)
        monitor.sample(step)


def fixed(monitor, steps):
    x = np.random.default_rng(0).random((32, 10), dtype=np.float32)
    for step in range(steps):
        keras.backend.clear_session(free_memory=False)
        _variant(step, x)
        monitor.sample(step)
