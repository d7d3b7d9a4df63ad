"""A ``tf.function`` ranking model is trained while a shadow predictor scores every batch with sampled tracing, written like the PyTorch predictor before pull request #42118: tracing is switched on for a random quarter of inferences, and the trace data of a finished inference is only cleaned up when tracing is on at cleanup time, which by then reflects the next inference; so a traced inference followed by an untraced one (on/off) leaves its whole trace in ``_pending_traces`` (TensorFlow ``tf.function``; small: a ~5 KiB trace for ~19 % of steps, ~0.9 KiB a step).

Source: pytorch/pytorch pull request #42118 "If we don't collect tracing,
always free the trace data": "We toggle trace on with a certain
probablility. In the case of 3 inferences with trace on/off/on. We leak the
trace from the first inference. Always clean up the trace will fix it."
Fix used here (the PR's): the finished inference's trace data is always
freed, and exported only if that inference was traced.
Summary: the predictor is a stand-in with the reported shape: ``run()``
samples ``self._tracing`` for the new request, records a ``TraceData`` (a
list of per-op event tuples: name, start, duration, shape string) when it
is on, and finishes the previous request afterwards (pipelined), checking
the current flag in the leaky build. The trainer is a ``tf.function``
pairwise ranking step of a Keras 40-64-1 scorer (batches of 128 pairs,
Adam); the predictor scores each batch with a ``tf.function`` forward pass
and records 24 op events when traced.

Here: 16,000 steps. The fixed predictor always frees the finished trace.
"""
import collections
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/pytorch/pytorch/pull/42118"
SLICE = "holdout24"
STEPS = 16000
BATCH = 128
FEATURES = 40
TRACE_PROB = 0.25
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["TraceData", "tuple", "list", "str", "float"],
              "holder_any": ["_pending_traces", "ShadowPredictor", "predictor"]},
    "fixed": {"verdict_not": "leak"},
}

_OPS = ["embedding_lookup", "matmul", "bias_add", "relu", "matmul_1", "bias_add_1", "sigmoid", "reduce_sum"]


class TraceData:
    def __init__(self, request_id):
        self.request_id = request_id
        self.events = []


class ShadowPredictor:
    def __init__(self, score_fn, rng, always_free):
        self.score_fn = score_fn
        self.rng = rng
        self.always_free = always_free
        self._tracing = False
        self._pending_traces = {}
        self._inflight = None
        self.exported = collections.deque(maxlen=16)

    def _finish(self, request_id, was_traced):
        if self.always_free:                                  # the fix (PyTorch #42118)
            trace = self._pending_traces.pop(request_id, None)
            if was_traced and trace is not None:
                self.exported.append(len(trace.events))
        elif self._tracing:                                   # looks at the *current* request's flag
            trace = self._pending_traces.pop(request_id, None)
            if trace is not None:
                self.exported.append(len(trace.events))

    def run(self, request_id, x):
        self._tracing = self.rng.random() < TRACE_PROB
        t0 = time.perf_counter()
        scores = self.score_fn(x)
        if self._tracing:
            trace = self._pending_traces[request_id] = TraceData(request_id)
            for k in range(24):
                op = _OPS[k % len(_OPS)]
                trace.events.append(("%s/%s:%d" % ("shadow_scorer", op, k), t0 + k * 1e-5,
                                     float(self.rng.random()) * 1e-4, "(%d,%d)" % (BATCH, 64 if k % 3 else FEATURES)))
        if self._inflight is not None:
            self._finish(*self._inflight)                     # the previous request completes now
        self._inflight = (request_id, self._tracing)
        return scores


def _run(monitor, steps, always_free):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    scorer = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                               keras.layers.Dense(1)])
    opt = keras.optimizers.Adam(1e-3)
    true_w = rng.standard_normal(FEATURES).astype(np.float32)

    @tf.function
    def train_step(a, b, pref):
        with tf.GradientTape() as tape:
            diff = scorer(a, training=True) - scorer(b, training=True)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(pref, diff))
        opt.apply_gradients(zip(tape.gradient(loss, scorer.trainable_variables), scorer.trainable_variables))
        return loss

    @tf.function
    def score(x):
        return tf.squeeze(scorer(x), 1)

    predictor = ShadowPredictor(score, rng, always_free)
    losses = collections.deque(maxlen=100)
    for step in range(steps):
        a = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
        b = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
        pref = ((a - b) @ true_w > 0).astype(np.float32)[:, None]
        losses.append(float(train_step(tf.constant(a), tf.constant(b), tf.constant(pref))))
        predictor.run("req-%08d" % step, tf.constant(a))
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, always_free=False)


def fixed(monitor, steps):
    _run(monitor, steps, always_free=True)
