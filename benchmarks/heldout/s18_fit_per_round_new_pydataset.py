"""``model.fit`` called once per round with a freshly built ``Sequence`` / ``PyDataset``.

Source: keras-team/keras#16947 "Memory runaway when training with Sequence in a
loop".
Summary: a training script generates new simulated images every round, wraps
them in a new ``keras.utils.Sequence`` and calls ``model.fit(seq, epochs=1)`` in
a Python loop; host memory keeps climbing with the number of rounds. The
maintainer traced it to the re-creation of the Sequence and the repeated
``fit`` calls, and adapted the code to one Sequence that refreshes its data in
``on_epoch_end`` and a single ``fit`` over all the rounds, which stops the
growth. (On Keras 3 each ``fit`` on a ``PyDataset`` wraps it in a new
``PyDatasetAdapter`` and generator-backed ``tf.data`` pipeline that is never
released.)
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/keras-team/keras/issues/16947"
SLICE = "holdout"
# one fit() call per round (~60-90 ms on 2 shared cores): 200 rounds keep the run in budget.
STEPS = 200
BATCH, BATCHES = 32, 2
EXPECT = {
    "leaky": {"verdict": "leak",
              "culprit_any": ["PyDatasetAdapter", "PyDataset", "SimulatedImages", "GeneratorState",
                              "generator", "KeyedRef"]},
    "fixed": {"verdict_not": "leak"},
}


def _simulate(rng):
    """One round of simulated 16x16 particle images and their intensities."""
    n = BATCH * BATCHES
    y = rng.random((n, 1)).astype(np.float32)
    x = rng.standard_normal((n, 256)).astype(np.float32) * 0.1
    x[:, 120:136] += y                                   # a bright stripe whose intensity is the label
    return x, y


class SimulatedImages(keras.utils.PyDataset):
    def __init__(self, rng, refresh=False, **kwargs):
        super().__init__(**kwargs)
        self.rng = rng
        self.refresh = refresh
        self.x, self.y = _simulate(rng)

    def __len__(self):
        return BATCHES

    def __getitem__(self, i):
        s = slice(i * BATCH, (i + 1) * BATCH)
        return self.x[s], self.y[s]

    def on_epoch_end(self):
        if self.refresh:
            self.x, self.y = _simulate(self.rng)


def _model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input(shape=(256,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(1),
    ])
    model.compile(optimizer="adam", loss="mse")
    return model


class _SamplePerEpoch(keras.callbacks.Callback):
    def __init__(self, monitor):
        super().__init__()
        self.monitor = monitor

    def on_epoch_end(self, epoch, logs=None):
        self.monitor.sample(epoch)


def leaky(monitor, steps):
    model = _model()
    rng = np.random.default_rng(0)
    for step in range(steps):                     # one round = new data, new Sequence, one fit call
        model.fit(SimulatedImages(rng), epochs=1, verbose=0)
        monitor.sample(step)


def fixed(monitor, steps):
    model = _model()
    rng = np.random.default_rng(0)
    seq = SimulatedImages(rng, refresh=True)      # one Sequence; new data every epoch
    model.fit(seq, epochs=steps, verbose=0, callbacks=[_SamplePerEpoch(monitor)])
