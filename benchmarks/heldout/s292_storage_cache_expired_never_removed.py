"""A ``tf.function`` regression trainer saves a run record every step to an agent runtime's storage layer and reads recent runs back for its early-stopping check, through a storage written like Hive's ``ConcurrentStorage`` before pull request #1833: the in-memory ``_cache`` notes a TTL per entry and ``load_run()`` skips stale ones, but nothing ever removes them, so every step's run record (metrics and a weight snapshot) stays in ``_cache`` for the life of the process (TensorFlow ``tf.function``; ~1 KiB a step in a ``RunRecord``, a dict, a tuple and a small ``ndarray``).

Source: aden-hive/hive pull request #1833 "Fix ConcurrentStorage cache leak
and add cache eviction tests": "``ConcurrentStorage``'s in-memory cache
tracked expired entries but never removed them, causing the cache
dictionary to grow without bound over time. This led to a gradual memory
leak in long-running processes. This PR fixes the leak by cleaning up
expired entries and enforcing a bounded LRU cache". Fix used here (the
PR's): ``_cache`` becomes an ``OrderedDict`` with ``max_cache_size``,
``_cleanup_expired_cache()`` before each insert and LRU eviction; the TTL
(3,000 s of a simulated one-second-a-step clock) and the cap (3,000
entries) fill at a quarter of the run and hold.
Summary: the storage is a stand-in with the PR's shape (``save_run``,
``load_run``, ``_set_cache``, a backend that keeps only the last 64 run
files, like a retention policy on disk). The trainer is a 48-feature
linear model with a ``tf.function`` step on batches of 128; each step
saves ``RunRecord(run_id, step, metrics, weights)`` and loads the last
eight runs to compare losses.

Here: 12,000 steps. The fixed storage sweeps expired entries and caps the cache.
"""
import collections
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/aden-hive/hive/pull/1833"
SLICE = "holdout25"
STEPS = 12000
BATCH = 128
FEATURES = 48
TTL = 3000.0
MAX_CACHE = 3000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["RunRecord", "dict", "tuple", "ndarray"],
              "holder_any": ["_cache", "ConcurrentStorage", "storage"]},
    "fixed": {"verdict_not": "leak"},
}


class RunRecord:
    def __init__(self, run_id, step, metrics, weights):
        self.run_id = run_id
        self.step = step
        self.metrics = metrics
        self.weights = weights


class _Backend:
    """File store with a retention policy: only the last 64 runs are kept."""
    def __init__(self, keep=64):
        self._files = collections.OrderedDict()
        self.keep = keep

    def write(self, run_id, record):
        self._files[run_id] = record
        while len(self._files) > self.keep:
            self._files.popitem(last=False)

    def read(self, run_id):
        return self._files.get(run_id)


class ConcurrentStorage:
    def __init__(self, clock, cache_ttl=TTL, max_cache_size=None):
        self._clock = clock
        self._cache_ttl = cache_ttl
        self.max_cache_size = max_cache_size
        self._cache = collections.OrderedDict() if max_cache_size else {}
        self._backend = _Backend()

    def _cleanup_expired_cache(self, now):
        for key in [k for k, (_, ts) in self._cache.items() if now - ts >= self._cache_ttl]:
            del self._cache[key]

    def _set_cache(self, key, value):
        now = self._clock()
        if self.max_cache_size:                            # the fix (hive #1833)
            self._cleanup_expired_cache(now)
            self._cache[key] = (value, now)
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache[key] = (value, now)

    def save_run(self, record):
        self._backend.write(record.run_id, record)
        self._set_cache("run:" + record.run_id, record)

    def load_run(self, run_id):
        key = "run:" + run_id
        hit = self._cache.get(key)
        if hit is not None:
            value, ts = hit
            if self._clock() - ts < self._cache_ttl:       # stale entries are skipped, never removed
                if self.max_cache_size:
                    self._cache.move_to_end(key)
                return value
        record = self._backend.read(run_id)
        if record is not None:
            self._set_cache(key, record)
        return record


def _run(monitor, steps, max_cache_size):
    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    tick = [0.0]
    storage = ConcurrentStorage(lambda: tick[0], max_cache_size=max_cache_size)
    true_w = rng.standard_normal((FEATURES, 1)).astype(np.float32)
    w = tf.Variable(tf.zeros((FEATURES, 1)))
    opt_lr = 0.05

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        w.assign_sub(opt_lr * tape.gradient(loss, w))
        return loss

    run_ids = []
    for step in range(steps):
        tick[0] += 1.0
        x = rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
        y = x @ true_w + 0.1 * rng.standard_normal((BATCH, 1)).astype(np.float32)
        loss = float(train_step(tf.constant(x), tf.constant(y)))
        run_id = "exec-%06d-%04x" % (step, int(rng.integers(1 << 16)))
        storage.save_run(RunRecord(run_id, step, {"loss": loss, "lr": opt_lr, "batch": BATCH},
                                   w.numpy()[:32, 0].copy()))
        run_ids.append(run_id)
        del run_ids[:-8]
        recent = [storage.load_run(r) for r in run_ids]
        if len(recent) == 8 and min(r.metrics["loss"] for r in recent[:4]) < min(r.metrics["loss"] for r in recent[4:]):
            opt_lr = max(0.01, opt_lr * 0.999)
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, max_cache_size=None)


def fixed(monitor, steps):
    _run(monitor, steps, max_cache_size=MAX_CACHE)
