"""A ``model.fit`` run reports per-batch context deltas through a telemetry collector written like ContextAnalyzerTerminal's delta engine: every batch posts a "tool use" event (the data loader's fetch, with its timing and an input summary) that is parked in the session's ``pending_tool_calls`` deque until the next status snapshot pairs it, but the status hook is misconfigured, so no snapshot ever arrives; the deque has no ``maxlen`` and the only cleanup evicts sessions idle for an hour, which a training session never is, so every batch's pending call stays (``model.fit`` + ``LeakCallback``; ~1.2 KiB and one tracked object a batch).

Source: roeimichael/ContextAnalyzerTerminal issue #5 "Fix unbounded
pending_tool_calls deque (memory leak)" (closed): "If a session sends
``PostToolUse`` events but the statusline hook is broken or misconfigured (so
snapshots never arrive), the ``session.pending_tool_calls`` deque grows
without limit. The deque has no ``maxlen`` set, and the only cleanup is
``cleanup_stale_sessions`` which evicts sessions after 1 hour of
*inactivity* - but if events keep coming, the session stays alive and the
deque grows forever." Fix used here (the issue's): ``deque(maxlen=100)``, so
old pending calls are dropped; it fills in the first 100 batches and holds.
Summary: the collector is a stand-in with the reported shape
(``SessionState`` dataclass with ``pending_tool_calls``, ``on_tool_use``,
``on_snapshot`` popping the paired calls, ``cleanup_stale_sessions``); a
Keras callback posts a ``PendingToolCall`` (tool name, timestamp, a
~400-character input summary and a dict of timings) at the end of every
batch and looks for a snapshot file that the misconfigured hook never
writes. The model is a Keras 48-128-64-5 classifier trained with
``model.fit`` (Adam, batches of 128, 100 batches an epoch).

Here: 8,000 batches (80 epochs). The fixed collector's deque has ``maxlen=100``.
"""
import collections
import dataclasses
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/roeimichael/ContextAnalyzerTerminal/issues/5"
SLICE = "holdout23"
STEPS = 8000            # batches; 100 per epoch, 80 epochs
PER_EPOCH = 100
BATCH = 128
FEATURES = 48
CLASSES = 5
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["PendingToolCall", "dict", "str"],
              "holder_any": ["pending_tool_calls", "SessionState", "sessions"]},
    "fixed": {"verdict_not": "leak"},
}


@dataclasses.dataclass
class PendingToolCall:
    tool_name: str
    timestamp: float
    input_summary: str
    timings: dict


@dataclasses.dataclass
class SessionState:
    session_id: str
    last_seen: float
    pending_tool_calls: collections.deque


class DeltaEngine:
    def __init__(self, maxlen):
        self.maxlen = maxlen
        self.sessions = {}

    def _session(self, session_id):
        s = self.sessions.get(session_id)
        if s is None:
            s = self.sessions[session_id] = SessionState(session_id, time.time(),
                                                         collections.deque(maxlen=self.maxlen))
        return s

    def on_tool_use(self, session_id, call):
        s = self._session(session_id)
        s.last_seen = time.time()
        s.pending_tool_calls.append(call)

    def on_snapshot(self, session_id, tokens):
        s = self._session(session_id)
        paired = list(s.pending_tool_calls)
        s.pending_tool_calls.clear()
        return tokens, paired

    def cleanup_stale_sessions(self, max_idle=3600.0):
        now = time.time()
        for sid in [sid for sid, s in self.sessions.items() if now - s.last_seen > max_idle]:
            del self.sessions[sid]


class ContextDeltaCallback(keras.callbacks.Callback):
    def __init__(self, engine, snapshot_path):
        super().__init__()
        self.engine = engine
        self.snapshot_path = snapshot_path            # the status hook writes elsewhere: never appears
        self.t0 = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        loss = float(logs.get("loss", 0.0)) if logs else 0.0
        summary = ("fetch(split='train', batch=%d, shard='part-%05d.npz', columns=[x0..x%d], "
                   "dtype=float32, loss_before=%.5f, rows=%d, transforms=[standardize(mean=train_mean.npy, "
                   "std=train_std.npy), clip(-6, 6), shuffle(buffer=%d, seed=%d)], prefetch=2, cache=None, "
                   "source='gs://telemetry-runs/train/part-%05d.npz', checksum=%08x)"
                   % (batch, batch % 97, FEATURES - 1, loss, BATCH, BATCH * 8, batch, batch % 97,
                      (batch * 2654435761) & 0xFFFFFFFF))
        self.engine.on_tool_use("train-run", PendingToolCall("data_loader.fetch", time.time(), summary,
                                                             {"fetch_ms": round((now - self.t0) * 1e3, 3),
                                                              "queue_depth": batch % 8, "batch": batch}))
        self.t0 = now
        if os.path.exists(self.snapshot_path):
            with open(self.snapshot_path) as fh:
                self.engine.on_snapshot("train-run", fh.read())
        if batch == 0:
            self.engine.cleanup_stale_sessions()


def _fit(logdir, steps, maxlen):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, PER_EPOCH * BATCH)
    x = (centers[y] + 1.2 * rng.standard_normal((len(y), FEATURES))).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(CLASSES)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    engine = DeltaEngine(maxlen)
    cb = ContextDeltaCallback(engine, os.path.join(logdir, "statusline", "snapshot.json"))
    model.fit(x, y.astype(np.int32), batch_size=BATCH, epochs=max(1, steps // PER_EPOCH), verbose=0,
              shuffle=True, callbacks=[cb, tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, maxlen=None)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, maxlen=100)
