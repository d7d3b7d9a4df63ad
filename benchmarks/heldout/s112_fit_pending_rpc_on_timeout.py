"""A ``PyDataset`` asks a remote hard-example scorer for per-sample weights with a short timeout, and its RPC client removes a request from its pending map only when a reply arrives, so every request the overloaded scorer drops stays in the map with its payload (``model.fit``; small and slow).

Source: tradeparadex/paradex-py#172 "fix: always drop the pending-request
entry in _send_request" ("``_send_request`` registers a future in
``_pending_requests`` keyed by message id, but only removes it again on
``asyncio.TimeoutError`` ... it accumulates for precisely the requests that
never receive a response ... A long-lived client that wraps its order
calls in its own timeout leaks one entry per cancellation"; the fix: "Move
the cleanup into a ``finally``, which covers every exit"), and
letsencrypt/boulder#1045 "DispatchSync doesn't delete from pending on
timeout" ("it does not delete the entries from the map of pending RPCs on
timeout. This means that if a service encounters many timeouts, it will
have an indefinite memory leak"). Fix: remove the entry in ``finally``.
Summary: the training data come from a ``keras.utils.PyDataset`` that, for
each batch, sends the batch's features to a hard-example scoring service
and waits up to 5 ms for per-sample weights, training with uniform weights
when the answer is late. The RPC client keeps ``_pending[msg_id] =
(future, payload)`` so that a late reply can be matched (and the payload
re-sent); the entry is removed in the reply handler only. The scorer,
running in a worker thread here, sheds about 15 % of requests under load
and never answers them, so their futures and 8 KiB feature payloads stay
in ``_pending`` for the rest of the run.

Here: batches of 32 x 64 float32 features, a 64-128-10 Keras MLP, 100
batches an epoch. The fixed twin pops the entry in a ``finally`` block.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; ``LeakCallback`` replaced by a stub callback):
leaky +5.9 MiB RSS from 20 % of the run to the end (~1.9 KiB a batch, ~12
KiB per dropped request; 565.2 / 566.7 / 571.2 MiB at 20 % / 40 % / end)
and +1.9 gc-tracked objects a batch (328,651 / 330,056 / 334,676), fixed
564.2 / 565.0 / 566.1 MiB with objects flat (327,283 / 327,284 /
327,284); ~5 ms a batch (21-23 s for 4,000 batches, with another job on
the machine).
"""
import concurrent.futures
import itertools
import os
import queue
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/tradeparadex/paradex-py/pull/172"
SLICE = "holdout9"
STEPS = 4000           # batches; 100 per epoch, 40 epochs
STEPS_PER_EPOCH = 100
BATCH = 32
FEATURES = 64
CLASSES = 10
SHED = 0.15            # fraction of requests the scorer drops
TIMEOUT = 0.005
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Future", "ndarray", "numpy", "tuple", "Condition"],
              "holder_any": ["_pending", "RpcClient"]},
    "fixed": {"verdict_not": "leak"},
}


class ScoringService:
    """Stands in for the remote scorer: answers most requests, sheds some under load."""

    def __init__(self, seed=1):
        self.inbox = queue.Queue()
        self.on_reply = None
        self.rng = np.random.default_rng(seed)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            item = self.inbox.get()
            if item is None:
                return
            msg_id, features = item
            if self.rng.random() < SHED:
                continue                                    # dropped: no reply ever
            norms = np.linalg.norm(features, axis=1)
            self.on_reply(msg_id, (norms / norms.mean()).astype(np.float32))

    def stop(self):
        self.inbox.put(None)
        self.thread.join()


class RpcClient:
    def __init__(self, service, cleanup_in_finally):
        self.service = service
        self.cleanup_in_finally = cleanup_in_finally
        self._pending = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        service.on_reply = self._on_reply

    def request(self, payload, timeout):
        msg_id = next(self._ids)
        future = concurrent.futures.Future()
        with self._lock:
            self._pending[msg_id] = (future, payload)       # kept to match a late reply / re-send
        self.service.inbox.put((msg_id, payload))
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            return None
        finally:
            if self.cleanup_in_finally:                      # the fix: every exit drops the entry
                with self._lock:
                    self._pending.pop(msg_id, None)

    def _on_reply(self, msg_id, result):
        with self._lock:
            entry = self._pending.pop(msg_id, None)
        if entry is not None and not entry[0].done():
            entry[0].set_result(result)


class WeightedStream(keras.utils.PyDataset):
    def __init__(self, client, **kwargs):
        super().__init__(**kwargs)
        self.client = client
        self.rng = np.random.default_rng(0)
        self.centers = self.rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
        self.late = 0

    def __len__(self):
        return STEPS_PER_EPOCH

    def __getitem__(self, idx):
        y = self.rng.integers(0, CLASSES, BATCH)
        x = self.centers[y] + self.rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
        w = self.client.request(x, TIMEOUT)
        if w is None:
            self.late += 1
            w = np.ones(BATCH, np.float32)
        return x, y, w


def _fit(logdir, steps, cleanup_in_finally):
    keras.utils.set_random_seed(0)
    service = ScoringService()
    try:
        data = WeightedStream(RpcClient(service, cleanup_in_finally))
        model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                                  keras.layers.Dense(CLASSES)])
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(data, epochs=max(1, steps // STEPS_PER_EPOCH), verbose=0,
                  callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])
    finally:
        service.stop()


def leaky_fit(logdir, steps):
    _fit(logdir, steps, cleanup_in_finally=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, cleanup_in_finally=True)
