"""An online anomaly model for a robot cell learns from telemetry that arrives over a zenoh-style pub/sub session; the session's receive-side cache maps each incoming key expression to its resolved subscriptions, and each cache entry owns a copied key expression and a cloned reference-counted vector of subscription handles, both taken from the session's refcounted slab; like zenoh-pico before its fix, the cache's LRU eviction frees the node but never runs the element clear callback, so an evicted entry's key copy and subscription vector keep their references and stay in the slab (plain Python + numpy, no TensorFlow; late onset: the cache only starts evicting when the extra joint sensors come online at 40 % of the run, then grows every step, ~1.4 KiB a step).

Source: eclipse-zenoh/zenoh-pico pull request #1242 "fix: clear LRU cache
values on eviction": "When the LRU cache reaches capacity, it evicts the
least-recently-used node before inserting the new entry. The eviction path
previously removed and freed the cache node, but did not clear the value
stored inside it ... subscription/queryable cache entries own copied key
expressions and cloned ref-counted vectors. If traffic uses more distinct
key expressions than ``Z_RX_CACHE_SIZE``, the RX cache churns and evicts old
entries. Before this fix, those evicted entries leaked their owned
contents. In a scenario with 23 topics total, 12 received topics, and the
default cache size of 10, memory usage grew significantly during RX cache
churn." Fix used here (the PR's): the insertion/eviction path calls the
element clear callback on the evicted value before dropping the node, as
the full-cache clear and delete paths already did.
Summary: the session is a stand-in in Python with zenoh-pico's shapes: a
slab of refcounted buffers (``alloc``/``clone``/``drop``, an entry is
released when its count reaches zero), 23 declared subscriptions
(``cell/<unit>/<sensor>/**`` style patterns), and an RX cache of 10 entries
(an ordered dict used as LRU) from key expression to an entry holding the
slab handles of its key copy and of its subscription vector. Each step
delivers 3 samples (16 float32 readings each); the matched subscriptions'
callbacks write them into the model's feature buffer, and the model (a
linear reconstruction of 48 features, numpy SGD) takes one step. For the
first 40 % of the run traffic comes from the 8 base sensors, which fit in
the cache; from then on 12 key expressions carry traffic (4 base sensors
and 8 joint sensors) and every lookup misses and evicts.

Here: 90,000 steps; evictions start at step 36,000. The fixed cache clears
(drops the key copy and the vector) of each evicted entry.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS read before each
object count, at the marks only): leaky 36.1 / 36.1 / 60.9 / 86.9 / 107.9
MiB RSS at 20 / 40 / 60 / 80 % / end (35.9 MiB at the first step; flat
until step 36,000, then ~1.4 KiB a step: three evicted entries a step, each
leaving its key copy, its subscription vector and their two slab slots)
with gc objects 24,011 at the first step, then 24,032 / 24,033 / 185,737 /
347,737 / 509,737 at the same marks (9 a step after the onset), 17.3 s for
90,000 steps (~0.15 ms a step before the onset, ~0.21 ms after); fixed 36.1
/ 36.1 / 36.1 / 36.1 / 36.1 MiB with objects 24,032 / 24,033 / 24,043 /
24,044 / 24,045 (the cache and the slab hold 8 entries before the onset and
10 after), 16.7 s. 17 s a variant in its process.
"""
import collections
import fnmatch
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/eclipse-zenoh/zenoh-pico/pull/1242"
SLICE = "holdout20"
STEPS = 90000
ONSET = 0.4
RX_CACHE_SIZE = 10
SAMPLES_PER_STEP = 3
READINGS = 16
FEATURES = 48
LR = 0.01
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["bytes", "list", "bytearray", "dict"],
              "holder_any": ["_slots", "Slab", "slab", "Session"]},
    "fixed": {"verdict_not": "leak"},
}

BASE_KEYS = [f"cell/{u}/{s}" for u in ("press", "feeder") for s in ("temp", "vibration", "current", "pressure")]
JOINT_KEYS = [f"cell/arm{a}/joint{j}/torque" for a in (1, 2) for j in range(1, 5)]
PATTERNS = ([f"cell/{u}/{s}" for u in ("press", "feeder") for s in ("temp", "vibration", "current", "pressure")]
            + [f"cell/arm{a}/joint*/torque" for a in (1, 2)]
            + [f"cell/arm{a}/joint{j}/**" for a in (1, 2) for j in range(1, 5)]
            + ["cell/*/temp", "cell/press/**", "cell/feeder/**", "cell/**", "cell/arm*/**"])   # 23 subscriptions


class Slab:
    """Refcounted slab: handle -> [count, payload]; an entry goes at count zero."""

    def __init__(self):
        self._slots = {}
        self._next = 0

    def alloc(self, payload):
        handle = self._next
        self._next += 1
        self._slots[handle] = [1, payload]
        return handle

    def clone(self, handle):
        self._slots[handle][0] += 1
        return handle

    def drop(self, handle):
        slot = self._slots[handle]
        slot[0] -= 1
        if slot[0] == 0:
            del self._slots[handle]

    def get(self, handle):
        return self._slots[handle][1]


class RxEntry:
    __slots__ = ("key_handle", "subs_handle")

    def __init__(self, key_handle, subs_handle):
        self.key_handle = key_handle
        self.subs_handle = subs_handle

    def clear(self, slab):                                    # the element clear callback
        slab.drop(self.key_handle)
        slab.drop(self.subs_handle)


class Session:
    def __init__(self, clear_on_evict):
        self.slab = Slab()
        self.subscriptions = []                              # (pattern, callback)
        self.rx_cache = collections.OrderedDict()
        self.clear_on_evict = clear_on_evict
        self.misses = 0

    def declare_subscriber(self, pattern, callback):
        self.subscriptions.append((pattern.replace("**", "*"), callback))

    def _resolve(self, key):
        subs = [i for i, (pat, _) in enumerate(self.subscriptions) if fnmatch.fnmatchcase(key, pat)]
        vec = self.slab.alloc(subs)                          # ref-counted vector
        key_copy = self.slab.alloc(key.encode())             # copied key expression
        entry = RxEntry(self.slab.clone(key_copy), self.slab.clone(vec))
        self.slab.drop(key_copy)                             # the resolver's own references
        self.slab.drop(vec)
        return entry

    def handle_push(self, key, payload):
        entry = self.rx_cache.get(key)
        if entry is None:
            self.misses += 1
            entry = self._resolve(key)
            if len(self.rx_cache) >= RX_CACHE_SIZE:
                _, old = self.rx_cache.popitem(last=False)
                if self.clear_on_evict:                      # the fix (zenoh-pico #1242)
                    old.clear(self.slab)
            self.rx_cache[key] = entry
        else:
            self.rx_cache.move_to_end(key)
        for i in self.slab.get(entry.subs_handle):
            self.subscriptions[i][1](key, payload)


def _run(monitor, steps, clear_on_evict):
    session = Session(clear_on_evict)
    rng = np.random.default_rng(0)
    keys = BASE_KEYS + JOINT_KEYS
    slot_of = {k: (i * 3) % FEATURES for i, k in enumerate(keys)}
    features = np.zeros(FEATURES, dtype=np.float32)
    hits = collections.Counter()

    def on_reading(key, payload):
        hits[key] += 1
        r = np.frombuffer(payload, dtype=np.float32)
        j = slot_of[key]
        features[j:j + 3] = (r[0], r[1:].mean(), r.std())

    for pat in PATTERNS:
        session.declare_subscriber(pat, on_reading)
    w = np.zeros((FEATURES, FEATURES), dtype=np.float32)
    readings = rng.standard_normal((1024, READINGS)).astype(np.float32)
    onset = int(steps * ONSET)
    active_late = BASE_KEYS[:4] + JOINT_KEYS                 # 12 key expressions with traffic
    for step in range(steps):
        active = BASE_KEYS if step < onset else active_late
        for k in range(SAMPLES_PER_STEP):
            key = active[(step * SAMPLES_PER_STEP + k) % len(active)]
            session.handle_push(key, readings[(step + k) % 1024].tobytes())
        err = w @ features - features
        w -= LR * np.outer(err, features)
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, clear_on_evict=False)


def fixed(monitor, steps):
    _run(monitor, steps, clear_on_evict=True)
