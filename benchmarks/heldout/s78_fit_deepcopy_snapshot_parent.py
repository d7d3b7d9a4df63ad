"""A callback deep-copies a small per-epoch training-state record that back-references its parent context, so every copy duplicates the context's validation data (``model.fit``; grows once an epoch).

Source: idaholab/MontePy#514 "Memory leaks with copy.deepcopy" (copying
one cell with ``copy.deepcopy`` in a loop: "It got really slow around
``i==11`` and was using over 3GB of RAM!"; each cell refers back to its
problem, so every copy dragged a copy of the whole problem along). Fix in
the same spirit as MontePy's: a ``__deepcopy__`` that copies the record's
own fields and shares the parent (``memo[id(parent)] = parent``).
Summary: to keep a history of the training state for later analysis, a
callback stores ``copy.deepcopy(self.state)`` at every epoch end. The state
is a few numbers and the current learning rate, but it holds ``ctx``, the
run's context object, which owns the validation arrays; each snapshot
therefore carries its own copy of the validation set.

Here: a 128-256-10 MLP, 100 batches of 64 an epoch, a context with a
2,000 x 128 float32 validation set (1 MiB). The fixed twin's snapshots
share the context and add a few hundred bytes an epoch.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; ``LeakCallback`` replaced by a stub callback):
leaky +26.8 MiB RSS from 20 % of the run to the end (~1.1 MiB per epoch,
in steps at each epoch end: a copy of the 1 MiB validation set and its
labels), fixed +3.2 MiB over the same span but settling (+1.9, +0.7, +0.4,
+0.2 MiB per fifth of the run; gc objects flat: allocator warm-up of the
Keras loop); ~4-5.6 ms a batch (14-18 s).
"""
import copy
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/idaholab/MontePy/issues/514"
SLICE = "holdout6"
STEPS = 3000           # batches; 100 per epoch, 30 epochs
STEPS_PER_EPOCH = 100
BATCH = 64
VAL_ROWS = 2000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "RunContext", "TrainState"],
              "holder_any": ["snapshots", "ctx", "StateHistory"]},
    "fixed": {"verdict_not": "leak"},
}


class RunContext:
    def __init__(self, x_val, y_val, config):
        self.x_val = x_val
        self.y_val = y_val
        self.config = config


class TrainState:
    share_parent = False

    def __init__(self, ctx):
        self.ctx = ctx
        self.epoch = 0
        self.lr = 0.0
        self.val_loss = None
        self.metrics = {}

    def __deepcopy__(self, memo):
        if self.share_parent:
            memo[id(self.ctx)] = self.ctx       # the fix: do not copy the parent
        new = TrainState.__new__(TrainState)
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new


class StateHistory(keras.callbacks.Callback):
    def __init__(self, state):
        super().__init__()
        self.state = state
        self.snapshots = []

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = epoch
        self.state.lr = float(self.model.optimizer.learning_rate)
        self.state.val_loss = (logs or {}).get("loss")
        self.state.metrics = dict(logs or {})
        self.snapshots.append(copy.deepcopy(self.state))


def _fit(logdir, steps, share_parent):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((10, 128)).astype(np.float32)
    n = STEPS_PER_EPOCH * BATCH
    y = rng.integers(0, 10, n)
    x = centers[y] + rng.standard_normal((n, 128)).astype(np.float32)
    yv = rng.integers(0, 10, VAL_ROWS)
    xv = centers[yv] + rng.standard_normal((VAL_ROWS, 128)).astype(np.float32)
    TrainState.share_parent = share_parent
    state = TrainState(RunContext(xv, yv, {"batch": BATCH, "layers": [256]}))
    model = keras.Sequential([keras.Input((128,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=BATCH, epochs=max(1, steps // STEPS_PER_EPOCH), verbose=0,
              callbacks=[StateHistory(state), tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, share_parent=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, share_parent=True)
