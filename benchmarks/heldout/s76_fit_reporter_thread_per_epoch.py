"""A callback starts a per-epoch report writer whose flush thread runs a bound method and is never stopped, so every epoch's reporter and its validation outputs stay alive (``model.fit``; grows once an epoch).

Source: pytorch/pytorch#61186 "possible SummaryWriter memory leak"
("SummaryWriter object persists in memory after del and gc.collect() ...
if I create a SummaryWriter object in another class, this seems to also
hold object from the other class from being gc'ed"; the writer's event
file writer runs a background flush thread that references it until
``close()``). Fix (the writer's documented use): ``close()`` the writer
when done with it.
Summary: a validation-report callback creates an ``EpochReporter`` at the
end of each epoch with that epoch's validation predictions and per-class
scores, and starts its flush thread on ``self._flush_loop``. The callback
drops its reference at the next epoch, but the running thread holds the
bound method, hence the reporter and its arrays, and it only stops on
``close()``.

Here: a 64-256-256-10 MLP, 100 batches of 64 an epoch, a 12,000-row
validation set whose predictions and float64 probabilities (~1 MiB) the
reporter keeps. The fixed twin closes the reporter before starting the
next one.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; ``LeakCallback`` replaced by a stub callback):
leaky +23 MiB RSS from 20 % of the run to the end (~0.95 MiB per epoch,
in steps at each epoch end, +10 gc-tracked objects and one live thread
per epoch), fixed +1.6 MiB over the same span, slowing to +0.1 MiB in the
last 20 % (allocator warm-up of the Keras loop; gc objects flat); ~5.6-6.4 ms
a batch (19-21 s).
"""
import os
import queue
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/pytorch/pytorch/issues/61186"
SLICE = "holdout6"
STEPS = 3000           # batches; 100 per epoch, 30 epochs
STEPS_PER_EPOCH = 100
BATCH = 64
VAL_ROWS = 12000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "EpochReporter", "Thread"],
              "holder_any": ["_flush_loop", "EpochReporter", "Thread", "_target"]},
    "fixed": {"verdict_not": "leak"},
}


class EpochReporter:
    def __init__(self, epoch, predictions, probabilities):
        self.epoch = epoch
        self.predictions = predictions
        self.probabilities = probabilities
        self.class_scores = {c: float(probabilities[:, c].mean()) for c in range(probabilities.shape[1])}
        self._events = queue.Queue()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._flush_loop, daemon=True)
        self._thread.start()
        self._events.put(("epoch", epoch, self.class_scores))

    def _flush_loop(self):
        while not self._closed.is_set():
            try:
                self._events.get(timeout=0.05)
            except queue.Empty:
                pass

    def close(self):
        self._closed.set()
        self._thread.join()


class ValidationReport(keras.callbacks.Callback):
    def __init__(self, x_val, close_previous):
        super().__init__()
        self.x_val = x_val
        self.close_previous = close_previous
        self.reporter = None

    def on_epoch_end(self, epoch, logs=None):
        logits = self.model(self.x_val, training=False)
        probs = tf.nn.softmax(logits).numpy()
        if self.close_previous and self.reporter is not None:
            self.reporter.close()
        self.reporter = EpochReporter(epoch, probs.argmax(1).astype(np.float32), probs.astype(np.float64))

    def on_train_end(self, logs=None):
        if self.close_previous and self.reporter is not None:
            self.reporter.close()


def _fit(logdir, steps, close_previous):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((10, 64)).astype(np.float32)
    n = STEPS_PER_EPOCH * BATCH
    y = rng.integers(0, 10, n)
    x = centers[y] + rng.standard_normal((n, 64)).astype(np.float32)
    yv = rng.integers(0, 10, VAL_ROWS)
    xv = centers[yv] + rng.standard_normal((VAL_ROWS, 64)).astype(np.float32)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=BATCH, epochs=max(1, steps // STEPS_PER_EPOCH), verbose=0,
              callbacks=[ValidationReport(xv, close_previous), tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, close_previous=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, close_previous=True)
