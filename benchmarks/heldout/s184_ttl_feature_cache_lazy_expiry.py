"""A streaming click-through trainer looks up each user's profile features through a small in-process TTL cache in front of the (slow) feature service; the cache only checks an entry's expiry when that same key is requested again, so the profiles of the many users who appear once in the stream expire but are never removed, and the cache grows with every new user for the whole run (numpy, no TensorFlow; grows every step).

Source: nestjs/cache-manager issue #805 "Bug: Memory is not released from
in-memory cache even after TTL expires": the in-memory store "employs a
lazy eviction mechanism, meaning that expired entries are not
automatically removed from memory unless a .get() call is explicitly
made for that key ... expired cache entries lingering in memory
indefinitely, especially if .get() is never invoked again"; expected:
"the item should be automatically removed from memory after the TTL
expires — even if .get() is never called again". Fix used here (the
expected behaviour, as in cpsubrian/node-stow PR #3 "Clear expired items
from the memory cache"): a sweep of expired entries every 256 inserts, so
the cache holds about one TTL's worth of users; it fills during the first
TTL (a bounded cache filling, 10 % of the run) and then stays flat.
Summary: a click model on the concatenated user profile (32 floats) and
item embedding (32 floats), 4 impressions a step scored by a 64-unit MLP;
user ids follow a heavy-tailed stream in which half of the impressions
come from users never seen before; the cache's clock is the step counter
(TTL = 2,000 steps).

Here: 60,000 steps. The fixed twin sweeps expired entries.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky 46.6 / 57.1 /
66.3 / 77.9 / 87.1 MiB RSS at 20 / 40 / 60 / 80 % / end (~0.7 KiB a step:
two new users' entries a step, never evicted) with gc objects 24,059 /
23,888 / 23,642 / 24,008 / 23,710 (flat: the entries are tuples of an int
and an array, which the collector stops tracking), 5.0 s for 60,000 steps
(~0.08 ms a step); fixed 38.2 / 38.5 / 38.5 / 38.5 / 38.5 MiB (the cache
holds ~4,000 live entries once the first TTL has passed) with objects
27,895 -> 27,880, 4.6 s.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/nestjs/cache-manager/issues/805"
SLICE = "holdout16"
STEPS = 60000
BATCH = 4
HIDDEN = 64
DIM = 32
TTL = 2000
SWEEP_EVERY = 256
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "tuple", "dict", "int", "TTLCache", "CacheEntry"],
              "holder_any": ["_store", "TTLCache", "cache"]},
    "fixed": {"verdict_not": "leak"},
}


class TTLCache:
    """get() drops an expired entry only when that key is asked for again (lazy expiry)."""

    def __init__(self, ttl, clock, sweep_every=0):
        self.ttl = ttl
        self.clock = clock
        self.sweep_every = sweep_every
        self._store = {}
        self._inserts = 0
        self.hits = self.misses = 0

    def get(self, key):
        entry = self._store.get(key)
        if entry is None:
            self.misses += 1
            return None
        expires, value = entry
        if expires <= self.clock():
            del self._store[key]
            self.misses += 1
            return None
        self.hits += 1
        return value

    def set(self, key, value):
        self._store[key] = (self.clock() + self.ttl, value)
        self._inserts += 1
        if self.sweep_every and self._inserts % self.sweep_every == 0:
            now = self.clock()                                            # the fix: evict expired entries
            for k in [k for k, (exp, _) in self._store.items() if exp <= now]:
                del self._store[k]


class FeatureService:
    """Stands in for the remote profile store: a deterministic profile per user id."""

    def __init__(self):
        self.calls = 0

    def profile(self, user):
        self.calls += 1
        r = np.random.default_rng(user)
        v = r.standard_normal(DIM).astype(np.float32)
        return v / np.linalg.norm(v)


def _user_stream(rng):
    regulars = rng.integers(0, 10**9, 2000)
    next_new = 10**9
    while True:
        if rng.random() < 0.5:
            yield int(regulars[min(int(rng.pareto(1.2)), 1999)])
        else:
            next_new += int(rng.integers(1, 50))
            yield next_new


def _train(monitor, steps, sweep):
    rng = np.random.default_rng(0)
    clock = [0]
    cache = TTLCache(TTL, lambda: clock[0], SWEEP_EVERY if sweep else 0)
    service = FeatureService()
    users = _user_stream(rng)
    items = rng.standard_normal((500, DIM)).astype(np.float32) / np.sqrt(DIM)
    w_true = rng.standard_normal(DIM * 2).astype(np.float32)
    w1 = (rng.standard_normal((DIM * 2, HIDDEN)) / 8).astype(np.float32)
    w2 = np.zeros(HIDDEN, np.float32)
    for step in range(steps):
        clock[0] = step
        feats = np.empty((BATCH, DIM * 2), np.float32)
        for i in range(BATCH):
            user = next(users)
            prof = cache.get(user)
            if prof is None:
                prof = service.profile(user)
                cache.set(user, prof)
            feats[i, :DIM] = prof
            feats[i, DIM:] = items[rng.integers(0, 500)]
        p_true = 1 / (1 + np.exp(-feats @ w_true))
        clicks = (rng.random(BATCH) < p_true).astype(np.float32)
        h = np.tanh(feats @ w1)                                  # a small MLP click model
        p = 1 / (1 + np.exp(-h @ w2))
        err = (clicks - p) / BATCH
        grad_h = np.outer(err, w2) * (1 - h * h)
        w2 += 0.05 * h.T @ err
        w1 += 0.05 * feats.T @ grad_h
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, sweep=False)


def fixed(monitor, steps):
    _train(monitor, steps, sweep=True)
