"""A numpy variant-effect classifier is trained on sites drawn window by window along a genome through a data API written like malariagen-data's ``snp_data`` before issue #1276 was fixed: ``_locate_site_class(region, site_mask, site_class)`` memoizes the boolean site mask it computes for each key in ``self._cache_locate_site_class``, a plain dict, and the module's ``_LOCATE_SITE_CLASS_CACHE_MAXSIZE = 64`` is never referenced, so every window the trainer moves to leaves a ~192 KiB boolean array behind (plain Python + numpy, no TensorFlow; large: one new array every 20 steps, ~10 KiB a step on average, in steps).

Source: malariagen/malariagen-data-python issue #1276
"_cache_locate_site_class can grow without bound despite
_LOCATE_SITE_CLASS_CACHE_MAXSIZE constant" (closed): "there is a constant
``_LOCATE_SITE_CLASS_CACHE_MAXSIZE = 64`` defined at line 45, and a cache
dictionary ``self._cache_locate_site_class`` initialized at line 78.
However, the maxsize constant is never actually enforced - the dictionary
grows without any eviction logic ... caches large NumPy boolean arrays (one
per contig x site_mask x site_class combination) ... Without eviction, a
user iterating over many contigs, site masks, and site classes accumulates
hundreds of megabytes of cached arrays that are never freed." Fix used here
(the issue's): the cache is bounded by the constant, evicting the least
recently used mask once 64 are held; it fills at about a fifth of the run
and holds.
Summary: the API is a stand-in with the reported shape (``SnpData`` with
``_cache_locate_site_class`` and ``_locate_site_class``); a mask is computed
from per-site annotations (a seeded position hash) for a 196,608-site
window. The trainer walks windows in order, 20 batches a window, revisiting
one of the four previous windows on every eighth batch (cache hits), and
fits a logistic-regression effect model (96 features, batches of 2,048
masked sites, SGD).

Here: 6,000 steps (300 windows). The fixed cache is an LRU of 64 masks.
"""
import collections
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/malariagen/malariagen-data-python/issues/1276"
SLICE = "holdout24"
STEPS = 6000
PER_WINDOW = 20
WINDOW = 196608
BATCH = 2048
FEATURES = 96
_LOCATE_SITE_CLASS_CACHE_MAXSIZE = 64
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "bool_", "_cache_locate_site_class"],
              "holder_any": ["_cache_locate_site_class", "SnpData", "api"]},
    "fixed": {"verdict_not": "leak"},
}


class SnpData:
    """malariagen_data-like SNP access; site-class masks are memoized per key."""

    def __init__(self, enforce_maxsize):
        self.enforce_maxsize = enforce_maxsize
        self._cache_locate_site_class = collections.OrderedDict() if enforce_maxsize else {}
        self.contig_offsets = {"2L": 0, "2R": 1 << 26, "3L": 2 << 26, "3R": 3 << 26, "X": 4 << 26}

    def _locate_site_class(self, region, site_mask, site_class):
        key = (region, site_mask, site_class)
        cache = self._cache_locate_site_class
        try:
            loc = cache[key]
            if self.enforce_maxsize:
                cache.move_to_end(key)
            return loc
        except KeyError:
            pass
        contig, start = region
        pos = np.arange(start, start + WINDOW, dtype=np.uint64) + np.uint64(self.contig_offsets[contig])
        h = (pos * np.uint64(2654435761)) ^ (pos >> np.uint64(7))
        loc = ((h % np.uint64(97)) < np.uint64(23)) & ((h % np.uint64(5)) != np.uint64(site_class))
        cache[key] = loc
        if self.enforce_maxsize and len(cache) > _LOCATE_SITE_CLASS_CACHE_MAXSIZE:
            cache.popitem(last=False)                   # the fix: the constant bounds the cache
        return loc


def _run(monitor, steps, enforce):
    rng = np.random.default_rng(0)
    api = SnpData(enforce)
    contigs = list(api.contig_offsets)
    true_w = rng.standard_normal(FEATURES).astype(np.float32)
    w = np.zeros(FEATURES, np.float32)
    proj = rng.standard_normal((8, FEATURES)).astype(np.float32)
    losses = collections.deque(maxlen=100)
    for step in range(steps):
        window = step // PER_WINDOW
        if step % 8 == 7 and window > 4:
            window -= int(rng.integers(1, 5))            # revisit a recent window: a cache hit
        region = (contigs[window % len(contigs)], (window // len(contigs)) * WINDOW)
        loc = api._locate_site_class(region, "gamb_colu", 1)
        idx = np.flatnonzero(loc[:65536])
        pick = rng.choice(idx, BATCH)
        base = np.stack([np.sin(pick * (k + 1) * 1e-3) for k in range(8)], axis=1).astype(np.float32)
        x = base @ proj + 0.1 * rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
        y = (x @ true_w > 0).astype(np.float32)
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        losses.append(float(-np.mean(y * np.log(p + 1e-7) + (1 - y) * np.log(1 - p + 1e-7))))
        w -= 0.1 * (x.T @ (p - y)) / BATCH
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, enforce=False)


def fixed(monitor, steps):
    _run(monitor, steps, enforce=True)
