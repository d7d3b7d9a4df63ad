"""``itertools.tee`` used to peek at a training generator, then ``model.fit`` on the other copy.

Source: kipoi/kipoi#277 "fix: train_iter now leveraging iterables" ("before,
the iter_cycle was used with ``itertools.tee`` method. This caused the
dataloader to keep the loaded samples in memory").
Summary: the training code splits the batch generator with ``itertools.tee``
(one copy to look at the first batch for the input shape, one to train on) and
keeps both; ``tee`` must buffer every item that one copy has consumed and the
other has not, so every batch ``fit`` draws stays in memory. Fix from the PR:
don't tee the loader; take the first batch and put it back
(``itertools.chain([first], it)``), or re-create the iterable.

Here: a Python generator of 32 x 256 float32 batches (32 KiB) fed to
``model.fit(..., steps_per_epoch=20)`` for 30 epochs.

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +15.3 MiB RSS from epoch 6 to epoch 30 (~32 KiB per batch), fixed
+0.3 MiB; ~2 ms a batch.
"""
import itertools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/kipoi/kipoi/pull/277"
SLICE = "holdout2"
STEPS = 600            # batches; 20 batches per epoch, 30 epochs
STEPS_PER_EPOCH = 20
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "tuple", "tee", "_tee"]},
    "fixed": {"verdict_not": "leak"},
}


def _batches(seed=0):
    """An endless stream of freshly loaded/augmented batches."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((256, 1)).astype(np.float32)
    while True:
        x = rng.standard_normal((32, 256), dtype=np.float32)
        y = (x @ w > 0).astype(np.float32)
        yield x, y


class Trainer:
    def __init__(self, batches, use_tee):
        if use_tee:
            self.peek_it, self.train_it = itertools.tee(batches)
            first = next(self.peek_it)
        else:
            first = next(batches)
            self.train_it = itertools.chain([first], batches)
        self.input_dim = first[0].shape[1]

    def model(self):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([
            keras.Input(shape=(self.input_dim,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(1),
        ])
        model.compile(optimizer="adam", loss=keras.losses.BinaryCrossentropy(from_logits=True))
        return model


def _as_generator(it):
    # Keras 3 takes Python generators (not arbitrary iterators) as fit() input
    yield from it


def _fit(logdir, steps, use_tee):
    trainer = Trainer(_batches(), use_tee)
    model = trainer.model()
    epochs = max(1, steps // STEPS_PER_EPOCH)
    model.fit(_as_generator(trainer.train_it), steps_per_epoch=STEPS_PER_EPOCH, epochs=epochs, verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, use_tee=True)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, use_tee=False)
