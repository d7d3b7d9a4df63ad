"""A drift-monitoring callback sends a sample of the model's weights to a remote metrics service every 3 batches through an RFC-style client whose ``call(..., timeout=300)`` arms a ``threading.Timer`` to abort a hung call and cancels it after the call returns; when the service rejects a payload the call raises, the caller logs and carries on, and the timer is never cancelled: its thread sleeps out the 300-second timeout (longer than the run) holding the rejected payload, so the stuck timer threads and their payloads pile up (``model.fit`` + ``LeakCallback``; grows with every rejected call, about one in seven).

Source: SAP-archive/PyRFC issue #352 "timeout halting main thread exit":
"When we use the timeout property on a connection or an RFC call and we
have an error during the RFC call then the produced Timer object will not
be cancelled"; the fix pattern of Parsl/parsl pull request #2775 "Ensure
timer.cancel() is always called": "When the function returns, whether by
good grace or ill omen, we need to cancel the timer". Fix used here
(Parsl's): ``timer.cancel()`` in a ``finally``.
Summary: a 64-128-64-10 Keras classifier on Gaussian clusters, batch 32,
50 batches an epoch; each call sends the first 16,384 weights (64 KiB of
float32) with the step and loss; the in-process service rejects payloads
whose checksum falls in a reserved range (~14 %).

Here: 120 epochs (6,000 batches, 2,000 calls). The fixed twin cancels the
timer in ``finally``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; a stub callback in place of
``LeakCallback``): leaky 571.8 / 577.0 / 582.5 / 586.9 / 591.0 MiB RSS at
20 / 40 / 60 / 80 % / end (~57 sleeping timer threads each fifth of the
run, ~90 KiB each with the 64 KiB payload) with gc objects 331,910 /
333,588 / 335,327 / 336,837 / 338,183 (~30 a stuck timer), 12.6 s for
6,000 batches (~2 ms a batch); fixed 568.6 / 571.4 / 571.5 / 571.6 / 571.6
MiB with objects 330,377 -> 330,380, 13.6 s.
"""
import logging
import os
import threading
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/SAP-archive/PyRFC/issues/352"
SLICE = "holdout16"
STEPS = 6000           # batches; 50 per epoch, 120 epochs
BATCH = 32
STEPS_PER_EPOCH = 50
FEATURES = 64
CLASSES = 10
CALL_EVERY = 3
TIMEOUT_S = 300.0
SAMPLE = 16384
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Timer", "ndarray", "Thread", "Event", "Condition"],
              "holder_any": ["_active", "Timer", "args", "threading"]},
    "fixed": {"verdict_not": "leak"},
}

log = logging.getLogger("drift.rfc")


class Rejected(Exception):
    pass


class MetricsService:
    """Stands in for the remote endpoint: validates and stores a digest of the payload."""

    def __init__(self):
        self.accepted = 0

    def handle(self, step, loss, weights):
        crc = zlib.crc32(weights.tobytes())
        if crc % 7 == 0:
            raise Rejected("payload %08x rejected: reserved checksum range" % crc)
        self.accepted += 1
        return {"step": step, "crc": crc, "mean": float(weights.mean()), "std": float(weights.std())}


class RfcClient:
    def __init__(self, service, cancel_in_finally):
        self.service = service
        self.cancel_in_finally = cancel_in_finally
        self.aborted = 0

    def _abort(self, call_id, payload):
        self.aborted += 1
        log.warning("call %d (%d bytes) timed out", call_id, payload[2].nbytes)

    def call(self, call_id, payload, timeout):
        timer = threading.Timer(timeout, self._abort, args=(call_id, payload))
        timer.daemon = True
        timer.start()
        if self.cancel_in_finally:
            try:
                return self.service.handle(*payload)
            finally:
                timer.cancel()                                     # the fix: cancelled on every exit
        result = self.service.handle(*payload)                     # the leak: an exception skips the cancel
        timer.cancel()
        return result


class DriftMonitor(keras.callbacks.Callback):
    def __init__(self, client):
        super().__init__()
        self.client = client
        self.calls = 0
        self.errors = 0
        self.digests = []

    def on_train_batch_end(self, batch, logs=None):
        self.calls += 1
        if self.calls % CALL_EVERY:
            return
        flat = np.concatenate([keras.ops.convert_to_numpy(w).ravel() for w in self.model.trainable_weights])
        payload = (self.calls, float(logs["loss"]) if logs and "loss" in logs else 0.0,
                   flat[:SAMPLE].astype(np.float32))
        try:
            digest = self.client.call(self.calls, payload, TIMEOUT_S)
            self.digests.append(digest["crc"])
        except Rejected as exc:
            self.errors += 1
            log.debug("drift report skipped: %s", exc)


def _fit(logdir, steps, cancel_in_finally):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    n = STEPS_PER_EPOCH * BATCH
    y = rng.integers(0, CLASSES, n).astype(np.int32)
    x = centers[y] + rng.standard_normal((n, FEATURES), dtype=np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(CLASSES)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    monitor = DriftMonitor(RfcClient(MetricsService(), cancel_in_finally))
    model.fit(x, y, batch_size=BATCH, epochs=max(1, steps // STEPS_PER_EPOCH), shuffle=True, verbose=0,
              callbacks=[monitor, tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, cancel_in_finally=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, cancel_in_finally=True)
