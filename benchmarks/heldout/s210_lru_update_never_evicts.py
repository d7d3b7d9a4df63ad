"""A distillation loop fetches the teacher's soft labels for each batch from a result backend and keeps them in a celery-style ``LRUCache(limit=4096)`` so that hot examples are not fetched twice; the client stores each batch of fetched results with ``cache.update(results)``, and ``update()`` writes into the underlying ``OrderedDict`` without ever popping the least recently used entries (only ``__setitem__`` evicts), so the "bounded" cache keeps the serialized soft labels of every example ever seen (numpy, no TensorFlow; grows every step, ~2 KiB of ``bytes`` and keys a step).

Source: celery/celery pull request #1267 "Fix object leak in LRUCache":
"LRUCache.update() method did not pop the least used items off the dict,
leading to cache constantly growing, and ultimately to OOM kill. This
happended at least with AMQP backend, on the **client** side." (the same
fix went to the 3.0 branch in #1268; kombu's ``LRUCache.update`` now
"writes into the ``OrderedDict`` first and trims only once ``len(data)``
has actually gone over the limit", kombu#2621). Fix used here (the PR's):
``update()`` pops the oldest entries while the cache is over its limit.
Summary: 32 examples a batch, 28 from a hot set of 2,000 ids and 4 drawn
from 10^9 others; a miss asks the backend, which runs the teacher (a
fixed random 64-256-32 MLP) and returns its 32 logits as float16
``bytes`` behind a 64-byte header (128 bytes a payload, under an
81-character key); the student, a 64-128-32 MLP, is trained on the
decoded soft labels with a KL loss.

Here: 30,000 steps. The fixed cache trims in ``update()`` too.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS and object counts
from separate runs): leaky 49.6 / 61.7 / 70.0 / 85.5 / 95.9 MiB RSS at 20
/ 40 / 60 / 80 % / end (~2 KiB a step: four new 128-byte payloads and
their 81-character keys in ``LRUCache.data``, with jumps as the
``OrderedDict`` resizes) with gc objects 23,630 throughout (flat: bytes,
strings and the dict's nodes are not tracked), 9.5 s for 30,000 steps
(~0.32 ms a step); fixed 39.4 / 39.4 / 39.5 / 39.4 / 39.5 MiB (the 4,096
entries fill in the first ~1,000 steps) with objects 23,630 throughout,
10.0 s.
"""
import collections
import os
import threading

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/celery/celery/pull/1267"
SLICE = "holdout18"
STEPS = 30000
BATCH = 32
COLD = 4
HIDDEN = 128
N_IDS = 10 ** 9
HOT = 2_000
FEATURES = 64
CLASSES = 32
LIMIT = 4096
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["bytes", "OrderedDict", "LRUCache", "dict"],
              "holder_any": ["data", "LRUCache", "cache", "_cache"]},
    "fixed": {"verdict_not": "leak"},
}


class LRUCache:
    """``celery.utils.functional.LRUCache`` (2013): an OrderedDict with a limit."""

    def __init__(self, limit, trim_on_update):
        self.limit = limit
        self.trim_on_update = trim_on_update
        self.mutex = threading.RLock()
        self.data = collections.OrderedDict()

    def get(self, key):
        with self.mutex:
            try:
                value = self.data.pop(key)
            except KeyError:
                return None
            self.data[key] = value                           # most recently used
            return value

    def __setitem__(self, key, value):
        with self.mutex:
            if self.limit and len(self.data) >= self.limit:
                self.data.popitem(last=False)
            self.data[key] = value

    def update(self, results):
        with self.mutex:
            data, limit = self.data, self.limit
            data.update(results)
            if self.trim_on_update and limit and len(data) > limit:
                for _ in range(len(data) - limit):          # the fix (celery#1267)
                    data.popitem(last=False)

    def __len__(self):
        return len(self.data)


class ResultBackend:
    """Runs the teacher for the ids it is asked about and returns serialized soft labels."""

    def __init__(self, rng):
        self.W1 = rng.standard_normal((FEATURES, 256)) / 8.0
        self.W2 = rng.standard_normal((256, CLASSES)) / 16.0
        self.proj = rng.standard_normal((FEATURES, FEATURES)) / 8.0

        self.freqs = rng.uniform(0.5, 3.0, FEATURES)
        self.phase = rng.uniform(0, 2 * np.pi, FEATURES)

    def features(self, ids):
        return np.tanh(np.sin((ids[:, None] % 100_003) * 1e-3 * self.freqs + self.phase) @ self.proj)

    def get_many(self, ids):
        x = self.features(ids)
        logits = (np.maximum(x @ self.W1, 0.0) @ self.W2).astype(np.float16)
        header = b"\x80\x04application/x-soft-labels;v=2;dtype=float16;classes=32".ljust(64, b"\x00")
        return {("celery-task-meta-%064d" % i): header + logits[k].tobytes() for k, i in enumerate(ids)}


def _train(monitor, steps, trim_on_update):
    rng = np.random.default_rng(0)
    backend = ResultBackend(rng)
    cache = LRUCache(LIMIT, trim_on_update)
    W1 = rng.standard_normal((FEATURES, HIDDEN)) / 8.0
    W2 = np.zeros((HIDDEN, CLASSES))
    for step in range(steps):
        hot = rng.integers(0, HOT, BATCH - COLD)
        cold = rng.integers(HOT, N_IDS, COLD)
        ids = np.concatenate([hot, cold])
        keys = ["celery-task-meta-%064d" % i for i in ids]
        payloads = [cache.get(k) for k in keys]
        missing = np.array([i for i, p in zip(ids, payloads) if p is None], dtype=np.int64)
        if len(missing):
            fetched = backend.get_many(missing)
            cache.update(fetched)                            # the client stores the batch of results
            payloads = [p if p is not None else fetched[k] for k, p in zip(keys, payloads)]
        teacher = np.stack([np.frombuffer(p[64:], dtype=np.float16).astype(np.float64) for p in payloads])
        t = np.exp(teacher - teacher.max(axis=1, keepdims=True))
        t /= t.sum(axis=1, keepdims=True)
        x = backend.features(ids)
        h = np.maximum(x @ W1, 0.0)
        s = h @ W2
        s = np.exp(s - s.max(axis=1, keepdims=True))
        s /= s.sum(axis=1, keepdims=True)
        d = (s - t) / BATCH                                   # gradient of KL(teacher || student)
        dh = (d @ W2.T) * (h > 0)
        W2 -= 0.5 * h.T @ d
        W1 -= 0.5 * x.T @ dh
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, trim_on_update=False)


def fixed(monitor, steps):
    _train(monitor, steps, trim_on_update=True)
