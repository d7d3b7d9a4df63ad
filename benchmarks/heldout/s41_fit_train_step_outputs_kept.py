"""A custom ``train_step`` that keeps every step's outputs on the model for an epoch-end summary (``model.fit``).

Source: Lightning-AI/pytorch-lightning#1510 "Memory (CPU and GPU) leaks during
the 1st epoch": the training loop appended every training step's outputs to a
list for the epoch-end hook, and the tensors stay referenced ("in case of
long epochs or huge outputs from the training step, the GPU memory will
blow"); the thread discussed keeping Python numbers (``.item()``) or only the
keys the epoch-end hook uses instead of the step's output tensors.
Summary: an autoencoder overrides ``train_step`` and appends
``{"loss": loss, "reconstruction": recon}`` to ``self.step_outputs`` so that a
callback can summarise the reconstruction error at the end of each epoch;
nothing ever empties the list, so every batch's reconstruction tensor is kept
for the whole run. Fix: keep the per-batch numbers the summary uses, and start
a new list at each epoch.

Here: ``run_eagerly=True`` (the outputs are eager tensors), a 256-32-256
dense autoencoder, batches of 32: a 32 KiB reconstruction per batch.

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +30.5 MiB RSS from 20 % of the run to the end (~39 KiB per batch),
fixed +3.9 MiB, flattening (the same when nothing is kept: the eager Keras
loop warming up); ~25-30 ms a batch.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/Lightning-AI/pytorch-lightning/issues/1510"
SLICE = "holdout3"
STEPS = 1000           # batches; 20 batches per epoch, 50 epochs
STEPS_PER_EPOCH = 20
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "dict", "TrackedDict", "list"],
              "holder_any": ["step_outputs"]},
    "fixed": {"verdict_not": "leak"},
}


class AutoEncoder(keras.Model):
    def __init__(self, keep_tensors):
        super().__init__()
        self.encoder = keras.layers.Dense(32, activation="relu")
        self.decoder = keras.layers.Dense(256)
        self.keep_tensors = keep_tensors
        self.step_outputs = []

    def call(self, x, training=False):
        return self.decoder(self.encoder(x))

    def train_step(self, data):
        x = data[0] if isinstance(data, tuple) else data
        with tf.GradientTape() as tape:
            recon = self(x, training=True)
            loss = tf.reduce_mean(tf.square(recon - x))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        if self.keep_tensors:
            self.step_outputs.append({"loss": loss, "reconstruction": recon})
        else:
            err = tf.reduce_mean(tf.square(recon - x), axis=1)
            self.step_outputs.append({"loss": float(loss), "worst": float(tf.reduce_max(err))})
        return {"loss": loss}


class EpochSummary(keras.callbacks.Callback):
    """Reads the epoch's step outputs; the fixed loop also starts a new list for the next epoch."""

    def __init__(self, clear):
        super().__init__()
        self.clear = clear
        self.summaries = []

    def on_epoch_end(self, epoch, logs=None):
        outs = self.model.step_outputs[-STEPS_PER_EPOCH:]
        worst = [o["worst"] if "worst" in o else float(tf.reduce_max(tf.reduce_mean(
            tf.square(o["reconstruction"]), axis=1))) for o in outs]
        self.summaries.append((float(np.mean([float(o["loss"]) for o in outs])), max(worst)))
        if self.clear:
            self.model.step_outputs.clear()


def _fit(logdir, steps, fixed):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((STEPS_PER_EPOCH * 32, 256), dtype=np.float32)
    model = AutoEncoder(keep_tensors=not fixed)
    model.compile(optimizer=keras.optimizers.SGD(0.05), run_eagerly=True)
    model.fit(x, batch_size=32, epochs=max(1, steps // STEPS_PER_EPOCH), verbose=0,
              callbacks=[EpochSummary(clear=fixed), tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, fixed=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, fixed=True)
