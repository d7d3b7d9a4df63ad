"""A numpy training loop serves a shadow prediction for every step through a small in-process worker whose event hub is written like cog's before pull request #1960: every prediction subscribes its listeners (progress, metrics, webhook) to the hub under a fresh integer id, and unsubscribing sets the slot to ``None`` instead of deleting it, so the hub's ``_subscribers`` dict gains three dead ``id -> None`` entries a step and every publish walks all of them (plain Python + numpy, no TensorFlow; small: ~0.3 KiB a step in int keys and dict slots, no tracked object grows; the step time grows as the dict does).

Source: replicate/cog pull request #1960 "Fix memory leak" (merged): "This
naive implementation of the observer pattern both leaks memory and causes a
very slow performance degradation over time as the ``_subscribers``
dictionary gets larger and larger, mostly full of ``None`` values. This
replaces the implementation with one that ensures that repeated
subscribe/unsubscribe calls don't affect performance or memory
consumption." (Reviewer: "this is the most hilariously minor memory leak
I've seen".) Fix used here (the PR's): unsubscribe removes the entry.
Summary: the hub is a stand-in with the shape of cog's: ``subscribe(fn)``
stores ``fn`` under the next id from an ``itertools.count`` and returns the
id, ``unsubscribe(sid)`` in the leaky build does ``_subscribers[sid] = None``,
and ``notify(event)`` calls every non-``None`` value. The trainer is a numpy
2-layer MLP (96-192-6, SGD, batches of 128); after each update the worker runs
a shadow prediction on the batch, publishing a "started" and a "completed"
event to three listeners subscribed for that prediction only.

Here: 24,000 steps. The fixed hub pops the subscription.
"""
import collections
import itertools
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/replicate/cog/pull/1960"
SLICE = "holdout23"
STEPS = 24000
BATCH = 128
FEATURES = 96
HIDDEN = 192
CLASSES = 6
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["int", "dict", "_subscribers", "EventHub"],
              "holder_any": ["_subscribers", "EventHub", "hub"]},
    "fixed": {"verdict_not": "leak"},
}


class EventHub:
    """cog-style observer: subscription ids map to callbacks."""

    def __init__(self, prune):
        self._subscribers = {}
        self._ids = itertools.count(1000)
        self._prune = prune

    def subscribe(self, fn):
        sid = next(self._ids)
        self._subscribers[sid] = fn
        return sid

    def unsubscribe(self, sid):
        if self._prune:
            self._subscribers.pop(sid, None)            # the fix (cog #1960)
        else:
            self._subscribers[sid] = None               # the reported code: the slot stays

    def notify(self, event):
        for fn in self._subscribers.values():
            if fn is not None:
                fn(event)


class Worker:
    def __init__(self, hub):
        self.hub = hub
        self.progress = collections.deque(maxlen=64)
        self.metrics = collections.Counter()
        self.webhook_queue = collections.deque(maxlen=32)

    def predict(self, w1, w2, x, step):
        sids = [self.hub.subscribe(lambda e: self.progress.append(e["status"])),
                self.hub.subscribe(lambda e: self.metrics.update([e["status"]])),
                self.hub.subscribe(lambda e: self.webhook_queue.append((e["id"], e["status"])))]
        self.hub.notify({"id": step, "status": "started"})
        out = np.maximum(x @ w1, 0) @ w2
        self.hub.notify({"id": step, "status": "completed", "top": int(out.sum(1).argmax())})
        for sid in sids:
            self.hub.unsubscribe(sid)
        return out


def _run(monitor, steps, prune):
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    w1 = (rng.standard_normal((FEATURES, HIDDEN)) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((HIDDEN, CLASSES)) * 0.1).astype(np.float32)
    worker = Worker(EventHub(prune))
    losses = collections.deque(maxlen=200)
    for step in range(steps):
        y = rng.integers(0, CLASSES, BATCH)
        x = centers[y] + rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
        h = np.maximum(x @ w1, 0)
        logits = h @ w2
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        losses.append(float(-np.log(p[np.arange(BATCH), y] + 1e-9).mean()))
        p[np.arange(BATCH), y] -= 1
        gh = (p @ w2.T) * (h > 0)
        w2 -= 0.05 * (h.T @ p / BATCH)
        w1 -= 0.05 * (x.T @ gh / BATCH)
        worker.predict(w1, w2, x, step)
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, prune=False)


def fixed(monitor, steps):
    _run(monitor, steps, prune=True)
