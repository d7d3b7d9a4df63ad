"""A Keras callback that keeps every epoch's validation predictions (``model.fit``).

Source: "Keras occupies an indefinitely increasing amount of memory for each
epoch" (Stack Overflow question; answer summarised at
https://codemia.io/knowledge-hub/path/keras_occupies_an_indefinitely_increasing_amount_of_memory_for_each_epoch).
Summary: memory grows every epoch during ``fit``; among the causes the answer
lists, the self-inflicted one is a custom callback storing the full predictions
of every epoch. Fix: keep what you need from them (a score per epoch, the latest
predictions) instead of every array. (Both callbacks call the model directly:
``predict`` once per epoch leaks a little native memory by itself, see s01.)
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://codemia.io/knowledge-hub/path/keras_occupies_an_indefinitely_increasing_amount_of_memory_for_each_epoch"
SLICE = "tune"
STEPS = 600            # batches; 20 batches per epoch, 30 epochs
STEPS_PER_EPOCH = 20
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy"]},
    "fixed": {"verdict_not": "leak"},
}


class KeepAllPredictions(keras.callbacks.Callback):
    def __init__(self, x_val):
        super().__init__()
        self.x_val = x_val
        self.history = []

    def on_epoch_end(self, epoch, logs=None):
        # 20000 x 10 float32 (781 KiB) kept per epoch
        self.history.append(np.asarray(self.model(self.x_val, training=False)))


class KeepScores(keras.callbacks.Callback):
    def __init__(self, x_val, y_val):
        super().__init__()
        self.x_val, self.y_val = x_val, y_val
        self.latest = None
        self.scores = []

    def on_epoch_end(self, epoch, logs=None):
        self.latest = np.asarray(self.model(self.x_val, training=False))
        self.scores.append(float(np.mean(self.latest.argmax(1) == self.y_val)))


def _setup(steps):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((STEPS_PER_EPOCH * 32, 20), dtype=np.float32)
    y = rng.integers(0, 10, size=(STEPS_PER_EPOCH * 32,))
    x_val = rng.standard_normal((20000, 20), dtype=np.float32)
    y_val = rng.integers(0, 10, size=(20000,))
    model = keras.Sequential([
        keras.Input(shape=(20,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    epochs = max(1, steps // STEPS_PER_EPOCH)
    return model, x, y, x_val, y_val, epochs


def leaky_fit(logdir, steps):
    model, x, y, x_val, y_val, epochs = _setup(steps)
    model.fit(x, y, batch_size=32, epochs=epochs, verbose=0,
              callbacks=[KeepAllPredictions(x_val), tb_leak_plugin.keras.LeakCallback(logdir)])


def fixed_fit(logdir, steps):
    model, x, y, x_val, y_val, epochs = _setup(steps)
    model.fit(x, y, batch_size=32, epochs=epochs, verbose=0,
              callbacks=[KeepScores(x_val, y_val), tb_leak_plugin.keras.LeakCallback(logdir)])
