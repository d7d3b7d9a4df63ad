"""An activation-monitor callback rebuilds its probe model every few batches by calling the model's layers on a fresh ``keras.Input``, and every rebuild leaves a node on each layer (``model.fit``).

Source: keras-team/keras#19058 "Potential memory leak with
SymbolicTensors" (memory grew over the iterations of a search that
created many models; "the problem is with one or more of the
SymbolicTensors created when creating a ``Conv2D`` layer, they seem to be
persistent even after the model has ceased to be used"; a maintainer
reproduced the growth on Keras 3 with both the TensorFlow and torch
backends). In Keras 3 each symbolic call of a layer records a ``Node``
(holding the call's ``KerasTensor`` inputs and outputs) in the layer's
``_inbound_nodes`` and in its input layers' ``_outbound_nodes``, and
nothing removes it when the functional model built from it is dropped.
Fix (the feature-extraction recipe of the Keras functional-API guide):
build the probe once from the model's existing symbolic outputs and reuse
it.
Summary: a callback computes the fraction of dead ReLU units per layer on
a fixed probe batch every 2 training batches. To get per-layer outputs it
builds ``keras.Model(inp, outs)`` by re-applying ``self.model.layers`` to
a new ``keras.Input`` each time. The probe model is dropped after use,
but every layer keeps one more inbound node and the previous layer one
more outbound node, with their symbolic tensors, for the rest of the run.

Here: a 64-(256 x 6)-10 MLP on a repeated ``tf.data`` pipeline, batches of
128, 100 batches an epoch, a 256-row probe batch. The fixed twin builds
the probe once in ``on_train_begin``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; ``LeakCallback`` replaced by a stub callback):
leaky +9.1 MiB RSS from 20 % of the run to the end (~11.6 KiB per batch,
+68 gc-tracked objects a batch: ``Node``, ``KerasTensor``,
``SymbolicArguments``, lists, dicts, tuples), fixed +0.9 MiB (gc objects
flat); ~20-30 ms a batch fixed, ~35-45 ms leaky (rebuilding the probe),
with another job on the machine (31-45 s; ~53 s under the runner).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/keras-team/keras/issues/19058"
SLICE = "holdout7"
STEPS = 1000           # batches; 100 per epoch, 10 epochs
STEPS_PER_EPOCH = 100
BATCH = 128
FEATURES = 64
WIDTH = 256
DEPTH = 6              # hidden layers
PROBE_EVERY = 2
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Node", "KerasTensor", "dict", "tuple"],
              "holder_any": ["_inbound_nodes", "_outbound_nodes"]},
    "fixed": {"verdict_not": "leak"},
}


class DeadUnitMonitor(keras.callbacks.Callback):
    def __init__(self, x_probe, rebuild_each_time):
        super().__init__()
        self.x_probe = x_probe
        self.rebuild_each_time = rebuild_each_time
        self.probe = None
        self.latest = {}

    def _build_probe(self):
        inp = keras.Input(shape=(FEATURES,))
        x, outs = inp, []
        for layer in self.model.layers:
            x = layer(x)                                      # records a Node on the layer
            outs.append(x)
        return keras.Model(inp, outs)

    def on_train_begin(self, logs=None):
        if not self.rebuild_each_time:
            self.probe = self._build_probe()                  # the fix: one probe for the run

    def on_train_batch_end(self, batch, logs=None):
        if batch % PROBE_EVERY:
            return
        probe = self._build_probe() if self.rebuild_each_time else self.probe
        acts = probe(self.x_probe, training=False)
        self.latest = {i: float(tf.reduce_mean(tf.cast(tf.reduce_max(a, axis=0) <= 0, tf.float32)))
                       for i, a in enumerate(acts[:-1])}


def _fit(logdir, steps, rebuild_each_time):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((10, FEATURES)).astype(np.float32)
    n = STEPS_PER_EPOCH * BATCH
    y = rng.integers(0, 10, n)
    x = centers[y] + rng.standard_normal((n, FEATURES)).astype(np.float32)
    train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(n, seed=0).batch(BATCH).repeat()
    model = keras.Sequential([keras.Input((FEATURES,))]
                             + [keras.layers.Dense(WIDTH, activation="relu") for _ in range(DEPTH)]
                             + [keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(train, steps_per_epoch=STEPS_PER_EPOCH, epochs=max(1, steps // STEPS_PER_EPOCH), shuffle=False,
              verbose=0,
              callbacks=[DeadUnitMonitor(x[:256], rebuild_each_time), tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, rebuild_each_time=True)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, rebuild_each_time=False)
