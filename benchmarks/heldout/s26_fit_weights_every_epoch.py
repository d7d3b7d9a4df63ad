"""A callback that keeps a copy of the model's weights after every epoch (``model.fit``).

Source: citoverse/cito#45 "Gewichte pro Epoche speichern" (saving the weights at
every epoch fills the memory on large networks; agreed fix: keep only the last
epoch's and the best epoch's weights, by validation loss), the same request as
keras-team/keras#6981 "Cache each epoch weights" ("I know it would cost more
memory").
Summary: to be able to roll back to any epoch, a callback appends
``model.get_weights()`` to a list at every epoch end; host memory grows by one
copy of the model per epoch. Fix: keep the latest and the best weights only.

Here: a 20-256-256-10 MLP (~73 k parameters, 285 KiB per copy), 20 batches per
epoch.

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +7.1 MiB RSS from epoch 6 to epoch 30 (24 copies of 285 KiB),
fixed +0.5 MiB (flat from epoch 12); ~12 ms a batch.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/citoverse/cito/issues/45"
SLICE = "holdout2"
STEPS = 600            # batches; 20 batches per epoch, 30 epochs
STEPS_PER_EPOCH = 20
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "list"]},
    "fixed": {"verdict_not": "leak"},
}


class KeepEveryEpoch(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.weights_per_epoch = []

    def on_epoch_end(self, epoch, logs=None):
        self.weights_per_epoch.append(self.model.get_weights())


class KeepLastAndBest(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.last = None
        self.best = None
        self.best_loss = np.inf

    def on_epoch_end(self, epoch, logs=None):
        self.last = self.model.get_weights()
        loss = (logs or {}).get("val_loss", np.inf)
        if loss < self.best_loss:
            self.best_loss = loss
            self.best = self.last


def _setup(steps):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    n = STEPS_PER_EPOCH * 32
    x = rng.standard_normal((n, 20), dtype=np.float32)
    y = rng.integers(0, 10, size=(n,))
    x_val = rng.standard_normal((256, 20), dtype=np.float32)
    y_val = rng.integers(0, 10, size=(256,))
    model = keras.Sequential([
        keras.Input(shape=(20,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    epochs = max(1, steps // STEPS_PER_EPOCH)
    return model, x, y, (x_val, y_val), epochs


def leaky_fit(logdir, steps):
    model, x, y, val, epochs = _setup(steps)
    model.fit(x, y, batch_size=32, epochs=epochs, verbose=0, validation_data=val,
              callbacks=[KeepEveryEpoch(), tb_leak_plugin.keras.LeakCallback(logdir)])


def fixed_fit(logdir, steps):
    model, x, y, val, epochs = _setup(steps)
    model.fit(x, y, batch_size=32, epochs=epochs, verbose=0, validation_data=val,
              callbacks=[KeepLastAndBest(), tb_leak_plugin.keras.LeakCallback(logdir)])
