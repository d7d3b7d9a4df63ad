"""A Keras callback ships each batch's metrics, a gradient-free activation histogram and a heartbeat to a metrics gateway over a socket.io-style client and waits for each acknowledgement with ``client.once("ack:<request id>", handler)``; the client's event emitter is written like component-emitter before its fix: ``off`` removes the fired handler from the event's list but leaves the emptied list under ``_callbacks["$ack:<request id>"]``, so every request id ever used stays as a key with an empty list (``model.fit`` + ``LeakCallback``; grows every batch, small: ~0.6 KiB a batch, three empty lists and their keys).

Source: sindresorhus/component-emitter pull request #74 "Avoid memory
leaks by removing event arrays": "When subscribing and then unsubscribing
from many different types of events, it can be observed that the
``Emitter._callbacks`` object starts to grow. This happens because, when
unsubscribing, the event specific event array is not removed when the last
subscriber unsubscribes" ("We use a lot of ``.once()`` with unique event
names in our code, and it's causing memory of our node app to grow really
quickly"; socketio/engine.io-client#552 "Adding/removing socket event
listeners leaks memory" was closed by taking the fix). Fix used here (the
PR's): when the last callback of an event is removed, ``off`` deletes the
event's entry from ``_callbacks``.
Summary: a 20-48-48-1 regression MLP trained with ``model.fit`` (Adam, 100
batches of 64 an epoch) on in-memory synthetic data; at each batch end the
callback sends three requests (metrics, a 16-bin histogram of the last
layer's weights, a heartbeat), each with a fresh request id, and registers
a ``once`` handler for its ack; the in-process gateway acks them at the
next batch, which fires and removes the handlers. The acks also go to a
list of the last 300 round-trip times (full after 100 batches, in both
variants).

Here: 8,000 batches (80 epochs). The fixed emitter deletes emptied event
entries.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a stub callback in place of
``LeakCallback``; RSS read before each object count, at the marks only):
leaky 571.2 / 572.2 / 573.2 / 574.0 / 574.9 MiB RSS at 20 / 40 / 60 / 80 %
/ end (566.0 MiB at the first batch; ~0.6 KiB a batch: three emptied lists
and their 37-character keys in ``_callbacks``) with gc objects 331,247 at
the first batch, then 336,170 / 341,597 / 346,496 / 351,758 / 356,360 at
the same marks (~3 a batch), 21.1 s for 8,000 batches (~2.6 ms a batch);
fixed 570.7 / 570.9 / 571.0 / 571.2 / 571.3 MiB with objects 332,033 /
332,000 / 331,802 / 332,330 / 332,132 (each ``once`` wrapper refers to
itself through its closure, so the fired ones are collected in cycles); a
16,000-batch fixed run: 568.6 MiB at 20 %, 569.0 at 40 %, 569.2 from 80 %
to the end. 25 s a variant in its process, imports included.
"""
import collections
import json
import os
import time
import uuid

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/sindresorhus/component-emitter/pull/74"
SLICE = "holdout20"
STEPS = 8000            # batches; 100 per epoch, 80 epochs
PER_EPOCH = 100
BATCH = 64
FEATURES = 20
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["list", "str", "dict"],
              "holder_any": ["_callbacks", "Emitter", "GatewayClient", "client"]},
    "fixed": {"verdict_not": "leak"},
}


class Emitter:
    """component-emitter, in Python."""

    def __init__(self, remove_empty):
        self._callbacks = {}
        self._remove_empty = remove_empty

    def on(self, event, fn):
        self._callbacks.setdefault("$" + event, []).append(fn)
        return self

    def once(self, event, fn):
        def on(*args):
            self.off(event, on)
            fn(*args)
        on.fn = fn
        self.on(event, on)
        return self

    def off(self, event=None, fn=None):
        if event is None:
            self._callbacks = {}
            return self
        callbacks = self._callbacks.get("$" + event)
        if not callbacks:
            return self
        if fn is None:
            del self._callbacks["$" + event]
            return self
        for i, cb in enumerate(callbacks):
            if cb is fn or getattr(cb, "fn", None) is fn:
                del callbacks[i]
                break
        if self._remove_empty and not callbacks:             # the fix (component-emitter#74)
            del self._callbacks["$" + event]
        return self

    def emit(self, event, *args):
        callbacks = self._callbacks.get("$" + event)
        if callbacks:
            for cb in list(callbacks):
                cb(*args)
        return self


class InProcessGateway:
    def __init__(self):
        self.pending = []
        self.received = collections.Counter()

    def send(self, kind, request_id, payload):
        self.received[kind] += 1
        self.pending.append((request_id, len(payload)))


class GatewayClient(Emitter):
    def __init__(self, gateway, remove_empty):
        super().__init__(remove_empty)
        self.gateway = gateway
        self.rtts = collections.deque(maxlen=300)

    def request(self, kind, body):
        request_id = uuid.uuid4().hex
        sent = time.perf_counter()
        self.once("ack:" + request_id, lambda size: self.rtts.append(time.perf_counter() - sent))
        self.gateway.send(kind, request_id, json.dumps(body))

    def poll(self):
        acks, self.gateway.pending = self.gateway.pending, []
        for request_id, size in acks:
            self.emit("ack:" + request_id, size)


class GatewayReporter(keras.callbacks.Callback):
    def __init__(self, remove_empty):
        super().__init__()
        self.client = GatewayClient(InProcessGateway(), remove_empty)
        self.batches = 0

    def on_train_batch_end(self, batch, logs=None):
        self.client.poll()                                   # acks of the previous batch's requests
        self.batches += 1
        logs = logs or {}
        w = keras.ops.convert_to_numpy(self.model.layers[-1].kernel)
        hist, _ = np.histogram(w, bins=16)
        self.client.request("metrics", {"batch": self.batches, "loss": float(logs.get("loss", 0.0))})
        self.client.request("histogram", {"batch": self.batches, "layer": "out", "counts": hist.tolist()})
        self.client.request("heartbeat", {"batch": self.batches, "t": time.time()})


def _fit(logdir, steps, remove_empty):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(FEATURES).astype(np.float32) / np.sqrt(FEATURES)
    x = rng.standard_normal((PER_EPOCH * BATCH, FEATURES)).astype(np.float32)
    y = (np.tanh(x @ w_true) + 0.1 * rng.standard_normal(len(x))).astype(np.float32)[:, None]
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(48, activation="relu"),
                              keras.layers.Dense(48, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(x, y, batch_size=BATCH, epochs=max(1, steps // PER_EPOCH), verbose=0, shuffle=True,
              callbacks=[GatewayReporter(remove_empty), tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, remove_empty=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, remove_empty=True)
