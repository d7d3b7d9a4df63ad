"""A Keras callback that keeps every layer's test-set activations for every epoch (``model.fit``).

Source: neuroinfo-os/deep-bottleneck#106 "Improve memory management for MNIST
runs", solved by neuroinfo-os/deep-bottleneck#132 "Feature/memory management".
Summary: an information-bottleneck study records, at the end of every epoch, the
activations of each dense layer on the test set (plus weight norms) in an
in-memory ``OrderedDict`` keyed by epoch (``self.activations_summary[epoch] =
data``) for the mutual-information analysis after training; on larger runs the
process runs out of memory. The fix in #132: write each epoch's activations to a
file as soon as they are computed, weight norms included (an HDF5 file there;
``.npy`` files here, no h5py), so nothing accumulates in memory.
"""
import os
import shutil
import tempfile
from collections import OrderedDict

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/neuroinfo-os/deep-bottleneck/pull/132"
SLICE = "holdout"
STEPS = 600            # batches; 15 batches per epoch, 40 epochs
STEPS_PER_EPOCH = 15
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "OrderedDict"]},
    "fixed": {"verdict_not": "leak"},
}

HIDDEN = (10, 7, 5, 4, 3)          # the tanh stack of the information-bottleneck papers
N_TEST = 4096


class _LayerActivations(keras.callbacks.Callback):
    def __init__(self, x_test):
        super().__init__()
        self.x_test = x_test

    def on_train_begin(self, logs=None):
        dense = [l for l in self.model.layers if isinstance(l, keras.layers.Dense)]
        self._dense = dense
        self._probe = keras.Model(self.model.inputs[0], [l.output for l in dense])

    def _epoch_data(self):
        acts = [np.asarray(a) for a in self._probe(self.x_test, training=False)]
        norms = [float(np.linalg.norm(np.asarray(l.kernel))) for l in self._dense]
        return acts, norms


class KeepActivationsInMemory(_LayerActivations):
    def __init__(self, x_test):
        super().__init__(x_test)
        self.activations_summary = OrderedDict()

    def on_epoch_end(self, epoch, logs=None):
        acts, norms = self._epoch_data()
        # 4096 x (10+7+5+4+3+1) float32 = 480 KiB of activations kept per epoch
        self.activations_summary[epoch] = {"weights_norm": norms, "activations": acts}


class WriteActivationsToDisk(_LayerActivations):
    def __init__(self, x_test, outdir):
        super().__init__(x_test)
        self.outdir = outdir
        self.latest_weights_norm = None

    def on_epoch_end(self, epoch, logs=None):
        acts, norms = self._epoch_data()
        for i, a in enumerate(acts):
            np.save(os.path.join(self.outdir, "epoch%04d_layer%d.npy" % (epoch, i)), a)
        np.save(os.path.join(self.outdir, "epoch%04d_weights_norm.npy" % epoch), np.asarray(norms))
        self.latest_weights_norm = norms


def _setup(steps):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2, size=(STEPS_PER_EPOCH * 64, 12)).astype(np.float32)
    y = (x.sum(axis=1) > 6).astype(np.int64)
    x_test = rng.integers(0, 2, size=(N_TEST, 12)).astype(np.float32)
    layers = [keras.Input(shape=(12,))]
    layers += [keras.layers.Dense(n, activation="tanh") for n in HIDDEN]
    layers += [keras.layers.Dense(1, activation="sigmoid")]
    model = keras.Sequential(layers)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="binary_crossentropy")
    epochs = max(1, steps // STEPS_PER_EPOCH)
    return model, x, y, x_test, epochs


def leaky_fit(logdir, steps):
    model, x, y, x_test, epochs = _setup(steps)
    model.fit(x, y, batch_size=64, epochs=epochs, verbose=0,
              callbacks=[KeepActivationsInMemory(x_test), tb_leak_plugin.keras.LeakCallback(logdir)])


def fixed_fit(logdir, steps):
    model, x, y, x_test, epochs = _setup(steps)
    outdir = tempfile.mkdtemp(prefix="ib-activations-")
    try:
        model.fit(x, y, batch_size=64, epochs=epochs, verbose=0,
                  callbacks=[WriteActivationsToDisk(x_test, outdir), tb_leak_plugin.keras.LeakCallback(logdir)])
    finally:
        shutil.rmtree(outdir, ignore_errors=True)
