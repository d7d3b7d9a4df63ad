"""A metrics-shipping callback queues a record per batch for a sender that cannot reach its server (``model.fit``).

Source: getlogbook/logbook#121 "Add maxsize option to ThreadedWrapperHandler"
("When put into a background thread, and the remote listener is offline,
without a max size the queue here will leak memory"), the same fix as
aws/aws-cli#358 "Cap the task queue size to a fixed amount" and
zq99/pgn2data#11 (unbounded ``queue.Queue`` filled faster than it is
drained). Fix from the PR: a bounded queue (``maxsize``), records beyond it
are dropped instead of piling up.
Summary: a custom callback ships per-batch metrics and a small weight
histogram to a tracking server through a background sender thread. The
server is unreachable for the whole run (the sender keeps backing off and
retrying the connection), so every record stays in the unbounded queue.

Here: a 32-64-10 MLP, batches of 32, 100 batches an epoch; each record is a
dict with the logs and a 64-bin histogram of each kernel (~1.5 KiB with its
objects). A small, slow leak; the fixed twin's queue fills to 256 records in
the first ~6 % of the run and stays there.

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +6.8 MiB RSS from 20 % of the run to the end (~2.2 KiB
per batch), fixed +0.7 MiB, flattening (the Keras loop itself drifts by a
few hundred KiB); ~6 ms a batch.
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

SOURCE = "https://github.com/getlogbook/logbook/pull/121"
SLICE = "holdout4"
STEPS = 4000           # batches; 100 batches per epoch, 40 epochs
STEPS_PER_EPOCH = 100
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["dict", "ndarray", "numpy", "deque", "float"],
              "holder_any": ["queue", "RemoteMetricsLogger"]},
    "fixed": {"verdict_not": "leak"},
}


class RemoteMetricsLogger(keras.callbacks.Callback):
    """Queues one record per batch; a sender thread ships them when the server is reachable."""

    def __init__(self, url, maxsize=0):
        super().__init__()
        self.url = url
        self.queue = queue.Queue(maxsize=maxsize)
        self.dropped = 0
        self._stop = threading.Event()
        self._sender = threading.Thread(target=self._send_loop, daemon=True)

    def _connect(self):
        return False                                   # the tracking server is offline for this run

    def _send_loop(self):
        backoff = 0.05
        while not self._stop.is_set():
            if self._connect():
                self._ship(self.queue.get())
            else:
                self._stop.wait(backoff)
                backoff = min(1.0, backoff * 2)

    def _ship(self, record):
        pass

    def on_train_begin(self, logs=None):
        self._sender.start()

    def on_train_batch_end(self, batch, logs=None):
        hists = [np.histogram(layer.kernel.numpy(), bins=64)[0] for layer in self.model.layers]
        record = {"batch": batch, "logs": dict(logs or {}), "hists": hists}
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1                          # the fix drops records beyond maxsize

    def on_train_end(self, logs=None):
        self._stop.set()
        self._sender.join()


def _setup(steps):
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
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model, x, y, max(1, steps // STEPS_PER_EPOCH)


def _fit(logdir, steps, maxsize):
    model, x, y, epochs = _setup(steps)
    model.fit(x, y, batch_size=32, epochs=epochs, verbose=0, shuffle=True,
              callbacks=[RemoteMetricsLogger("https://tracking.example/api", maxsize=maxsize),
                         tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, maxsize=0)                     # unbounded


def fixed_fit(logdir, steps):
    _fit(logdir, steps, maxsize=256)
