"""Per-batch log records buffered by a ``logging.handlers.MemoryHandler`` that has no target yet (``model.fit``).

Source: Tribler/tribler#8530 "Fixed memory leak in the logging endpoint"
("due to the ``MemoryHandler`` flushing mechanism"; fix: "I set the capacity
to 400 records. This equates to roughly one minute of logging output before
records start rotating out"), and python/cpython#107028 (``flush()`` does not
clear the buffer when the handler has no target, although the docstring said
it did). A ``MemoryHandler`` only empties its buffer into its target; until a
target is set, every "flush" keeps all records.
Summary: a training service keeps recent log records in memory for a log
viewer, which attaches itself as the handler's target when a client
connects. Nobody connects during a long unattended run, so the handler's
buffer keeps every record a metrics callback logs, one per batch, with its
arguments. Fix from the PR: a buffer of fixed capacity whose oldest records
rotate out.

Here: a 32-64-10 MLP, batches of 32, 100 batches an epoch; one INFO record per
batch whose arguments hold the batch's logs (~1 KiB with the record). A
small, slow leak; the fixed twin's buffer fills to 400 records in the first
10 % of the run and stays there.

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +3.6 MiB RSS from 20 % of the run to the end (~1.2 KiB
per batch), fixed +0.7 MiB, flattening (buffer full at 10 %, then the Keras
loop's own drift); ~2.6 ms a batch.
"""
import collections
import logging
import logging.handlers
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/Tribler/tribler/pull/8530"
SLICE = "holdout4"
STEPS = 4000           # batches; 100 batches per epoch, 40 epochs
STEPS_PER_EPOCH = 100
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["LogRecord", "dict", "tuple", "float"],
              "holder_any": ["buffer", "MemoryHandler", "handlers"]},
    "fixed": {"verdict_not": "leak"},
}


class RotatingMemoryHandler(logging.handlers.MemoryHandler):
    """The fix from the PR: a fixed capacity, oldest records rotate out until a viewer attaches."""

    def __init__(self, capacity):
        super().__init__(capacity, flushLevel=logging.CRITICAL, target=None)
        self.buffer = collections.deque(maxlen=capacity)

    def shouldFlush(self, record):
        return self.target is not None and super().shouldFlush(record)


class BatchLogger(keras.callbacks.Callback):
    def __init__(self, logger):
        super().__init__()
        self.logger = logger
        self.seen = 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        self.logger.info("batch %d seen %d logs %s", batch, self.seen, dict(logs or {}))


def _fit(logdir, steps, handler):
    logger = logging.getLogger("trainer.s54.%s" % type(handler).__name__)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.addHandler(handler)                          # the log viewer attaches its target on connect
    try:
        keras.utils.set_random_seed(0)
        rng = np.random.default_rng(0)
        n = STEPS_PER_EPOCH * 32
        x = rng.standard_normal((n, 32), dtype=np.float32)
        y = rng.integers(0, 10, size=(n,))
        model = keras.Sequential([
            keras.Input(shape=(32,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ])
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
        model.fit(x, y, batch_size=32, epochs=max(1, steps // STEPS_PER_EPOCH), verbose=0, shuffle=True,
                  callbacks=[BatchLogger(logger), tb_leak_plugin.keras.LeakCallback(logdir)])
    finally:
        logger.removeHandler(handler)


def leaky_fit(logdir, steps):
    _fit(logdir, steps, logging.handlers.MemoryHandler(capacity=400, flushLevel=logging.ERROR, target=None))


def fixed_fit(logdir, steps):
    _fit(logdir, steps, RotatingMemoryHandler(capacity=400))
