"""A numpy training loop stages every step's shard of outputs in its own temporary directory and reports storage use through a helper written like the ODS dashboard API's ``_DirSizeCache`` before pull request #1856: a cached size is only dropped when the same path is asked for again after its TTL, and the trainer asks about each step's fresh directory once, so ``_cache`` keeps a ``path -> (size, timestamp)`` entry for every step (plain Python + numpy, no TensorFlow; small: ~0.3 KiB a step in a string key, a tuple and a dict slot).

Source: Osmantic/ODS pull request #1856 "fix(dashboard-api): prevent memory
leak in _DirSizeCache" (merged): "Previously, the cache dictionary only
cleared stale entries if the exact same path was queried again. For unique
or temporary paths that are only queried once, the entries remained in the
dictionary forever, causing unbounded memory growth." Solution: "Added an
LRU-style eviction mechanism to enforce a maximum dictionary size. Prunes
all expired keys whenever a new entry is added." Fix used here (the PR's):
a size cap with least-recently-used eviction and a sweep of expired keys
on insert; the cap (1,500 entries here) fills at about a fifth of the run and
holds.
Summary: the cache is a stand-in with the PR's shape (``get(path)``
computing the size on a miss, ``ttl`` of 600 s); the "directory size" is
summed from the trainer's in-memory manifest of the files it staged there
(no file system access). The trainer is a numpy softmax regression
(128 features, 10 classes, batches of 2,048) that stages its logits shard per
step under ``/scratch/run-7/stage/step-%07d`` and asks the cache for that
directory's size and for the run root's.

Here: 7,000 steps. The fixed cache holds at most 1,500 entries.
"""
import collections
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/Osmantic/ODS/pull/1856"
SLICE = "holdout24"
STEPS = 7000
BATCH = 2048
FEATURES = 128
CLASSES = 10
MAX_ENTRIES = 1500
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["str", "tuple", "dict", "_DirSizeCache"],
              "holder_any": ["_cache", "_DirSizeCache", "dir_sizes"]},
    "fixed": {"verdict_not": "leak"},
}


class _DirSizeCache:
    def __init__(self, size_of, ttl=600.0, max_entries=None):
        self._size_of = size_of
        self.ttl = ttl
        self.max_entries = max_entries
        self._cache = collections.OrderedDict() if max_entries else {}

    def get(self, path):
        now = time.monotonic()
        hit = self._cache.get(path)
        if hit is not None:
            if now - hit[1] < self.ttl:
                if self.max_entries:
                    self._cache.move_to_end(path)
                return hit[0]
            del self._cache[path]                         # stale entries go only when asked for again
        size = self._size_of(path)
        if self.max_entries:                              # the fix (ODS #1856)
            for p in [p for p, (_, ts) in self._cache.items() if now - ts >= self.ttl]:
                del self._cache[p]
            while len(self._cache) >= self.max_entries:
                self._cache.popitem(last=False)
        self._cache[path] = (size, now)
        return size


def _run(monitor, steps, max_entries):
    rng = np.random.default_rng(0)
    manifest = collections.deque(maxlen=64)               # (dir, bytes) of recently staged shards
    def size_of(path):
        return sum(n for d, n in manifest if d.startswith(path))
    dir_sizes = _DirSizeCache(size_of, max_entries=max_entries)
    w_true = rng.standard_normal((FEATURES, CLASSES)).astype(np.float32)
    w = np.zeros((FEATURES, CLASSES), np.float32)
    usage = collections.deque(maxlen=100)
    for step in range(steps):
        x = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
        y = (x @ w_true).argmax(1)
        logits = x @ w
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(BATCH), y] -= 1
        w -= 0.1 * x.T @ p / BATCH
        stage_dir = "/scratch/run-7/stage/step-%07d" % step
        manifest.append((stage_dir, logits.nbytes + 512))
        usage.append((dir_sizes.get(stage_dir), dir_sizes.get("/scratch/run-7")))
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, max_entries=None)


def fixed(monitor, steps):
    _run(monitor, steps, max_entries=MAX_ENTRIES)
