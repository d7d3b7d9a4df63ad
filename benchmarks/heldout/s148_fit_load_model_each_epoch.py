"""A "best checkpoint" callback saves the model whenever the validation loss improves and, at every epoch end, reloads the best ``.keras`` file with ``keras.models.load_model`` to score it on a held-out set; every load builds a whole new model (layers, variables, functions) and part of each one is never released, so memory steps up once an epoch (``model.fit``; grows in bursts).

Source: tensorflow/tensorflow#35524 "Suspected memory leak - when
loading multiple models with tf.keras.models.load_model()" ("the number
of python objects doesn't seem to be the cause for the leak ... the
memory usage of the CPU is still increasing"; "I tried loading the same
model from json and there are no memory leaks") and
tensorflow/tensorflow#47122 "Memory leak loading keras model in loop"
(``load_model`` in a ``while True`` loop "Crashes my VM after some time
due to OOM"). Fix used here (after the note that a model built from JSON did
not leak): build the scoring
model once and load only the weights into it
(``scorer.load_weights(best_path)``).
Summary: a regression MLP is trained with ``model.fit``; the callback
keeps ``best.keras`` up to date and at every epoch end evaluates the
best model so far on 1,024 held-out samples.

Here: 32 features, a 32-64-64-1 Keras MLP, 20 batches of 32 an epoch,
150 epochs. The fixed twin's callback owns one scoring model and
restores ``best.weights.h5`` into it.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; a do-nothing ``monitor.sample``; ``LeakCallback`` replaced by a stub callback): leaky
576.6 / 582.6 / 586.0 / 588.8 / 592.8 MiB RSS at 20 / 40 / 60 / 80 % /
end (~0.1 MiB an epoch, at each epoch end) with gc objects 344,699 /
356,472 / 338,796 / 351,998 / 361,867 (a saw-tooth of cyclic garbage
over a rising floor), 11.2 s for 3,000 batches; fixed 570.5 / 571.9 /
574.0 / 575.9 / 574.9 MiB (the allocator settling, down at the end)
with objects flat (331,860 -> 332,305), 7.1 s.
"""
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/tensorflow/tensorflow/issues/35524"
SLICE = "holdout12"
STEPS = 3000           # batches; 20 per epoch, 150 epochs
STEPS_PER_EPOCH = 20
BATCH = 32
FEATURES = 32
HELD_OUT = 1024
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "Dense", "Variable", "Sequential", "Layer",
                                                 "Function", "dict"]},
    "fixed": {"verdict_not": "leak"},
}


def _build():
    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                             keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])


class BestModelScore(keras.callbacks.Callback):
    def __init__(self, x, y, reload_full):
        super().__init__()
        self.x, self.y, self.reload_full = x, y, reload_full
        self.dir = tempfile.mkdtemp(prefix="best-")
        self.best = np.inf
        self.scores = []
        self.scorer = None if reload_full else _build()

    def on_epoch_end(self, epoch, logs=None):
        loss = float(logs["loss"])
        if loss < self.best or epoch == 0:
            self.best = loss
            if self.reload_full:
                self.model.save(os.path.join(self.dir, "best.keras"))
            else:
                self.model.save_weights(os.path.join(self.dir, "best.weights.h5"))
        if self.reload_full:
            scorer = keras.models.load_model(os.path.join(self.dir, "best.keras"))    # the leak: a full load
        else:
            scorer = self.scorer
            scorer.load_weights(os.path.join(self.dir, "best.weights.h5"))          # the fix: weights only
        pred = scorer(self.x, training=False)
        self.scores.append(float(tf.reduce_mean((pred[:, 0] - self.y) ** 2)))


def _fit(logdir, steps, reload_full):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    w = rng.normal(size=(FEATURES,)).astype(np.float32)
    n = STEPS_PER_EPOCH * BATCH
    x = rng.standard_normal((n, FEATURES), dtype=np.float32)
    y = np.tanh(x @ w / 4).astype(np.float32)
    xv = rng.standard_normal((HELD_OUT, FEATURES), dtype=np.float32)
    yv = np.tanh(xv @ w / 4).astype(np.float32)
    model = _build()
    model.compile(optimizer="adam", loss="mse")
    epochs = max(1, steps // STEPS_PER_EPOCH)
    model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=True, verbose=0,
              callbacks=[BestModelScore(xv, yv, reload_full), tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, reload_full=True)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, reload_full=False)
