"""A base-calling error model is trained with a ``tf.function`` step on reads produced on the fly by a sequencing-read simulator written like NEAT before pull request #272: for every read it samples, the simulator still appends the read's quality array and its list of error positions to two lists on the simulator object, left over from a refactoring that stopped using them, so they keep every read ever simulated (TensorFlow ``tf.function``; grows every step, small: ~2.5 KiB a step, 8 reads of 150 bases).

Source: ncsa/NEAT pull request #272 "Fix for memory leak" (merged): "Found
some lists that were being written, but the code was refactored so that the
lists were never actually used. Could cause a small memory leak, so they were
removed." Fix used here (the PR's): the two lists are gone; the read
generator yields the read and forgets it.
Summary: the simulator is a stand-in with the shape of NEAT's read
generation (a reference sequence, a quality model that draws a per-position
Phred array, an error model that draws substitution positions from the
qualities, and ``generate_read()`` returning the read, qualities and
errors). Each step draws 8 reads of 150 bases and trains a Keras model (a
one-hot 150x4 input, a 1-D convolution of 32 filters, a 64-unit dense layer)
to predict which positions carry a substitution, with Adam.

Here: 8,000 steps. The fixed simulator keeps no per-read lists.
"""
import collections
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/ncsa/NEAT/pull/272"
SLICE = "holdout22"
STEPS = 8000
READS = 8
READ_LEN = 150
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "list", "int"],
              "holder_any": ["all_qualities", "all_errors", "ReadSimulator", "simulator"]},
    "fixed": {"verdict_not": "leak"},
}


class ReadSimulator:
    def __init__(self, seed, keep_lists):
        self.rng = np.random.default_rng(seed)
        self.reference = self.rng.integers(0, 4, 200_000).astype(np.int8)
        self.keep_lists = keep_lists
        self.all_qualities = []                          # written, never read (removed by NEAT #272)
        self.all_errors = []

    def generate_read(self):
        start = int(self.rng.integers(0, len(self.reference) - READ_LEN))
        read = self.reference[start:start + READ_LEN].copy()
        quals = np.clip(self.rng.normal(34, 6, READ_LEN) - np.linspace(0, 12, READ_LEN), 2, 41).astype(np.int8)
        p_err = 10.0 ** (-quals / 10.0)
        errors = np.flatnonzero(self.rng.random(READ_LEN) < p_err * 3)
        read[errors] = (read[errors] + self.rng.integers(1, 4, len(errors))) % 4
        if self.keep_lists:
            self.all_qualities.append(quals)
            self.all_errors.append(errors.tolist())
        return read, quals, errors


def _run(monitor, steps, keep_lists):
    keras.utils.set_random_seed(0)
    sim = ReadSimulator(0, keep_lists)
    model = keras.Sequential([keras.Input((READ_LEN, 5)), keras.layers.Conv1D(32, 5, padding="same", activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    opt = keras.optimizers.Adam(1e-3)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = tf.squeeze(model(x, training=True), -1)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses = collections.deque(maxlen=200)
    eye = np.eye(4, dtype=np.float32)
    for step in range(steps):
        x = np.zeros((READS, READ_LEN, 5), np.float32)
        y = np.zeros((READS, READ_LEN), np.float32)
        for i in range(READS):
            read, quals, errors = sim.generate_read()
            x[i, :, :4] = eye[read]
            x[i, :, 4] = quals / 41.0
            y[i, errors] = 1.0
        losses.append(float(train_step(x, y)))
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, keep_lists=True)


def fixed(monitor, steps):
    _run(monitor, steps, keep_lists=False)
