"""A home-made ``@memoized`` decorator whose closure dict caches every augmented sample (no TensorFlow).

Source: apache/superset#17319 "fix(core): memory leak in memorized decorator"
(closes apache/superset#15132): the project's ``@memoized`` decorator cached
function results in memory without considering "how to release memory" or
"how to define cache size", so memory grew with every new argument; the fix
replaced it with a ``functools.lru_cache`` wrapper.
Summary: a data loader memoizes ``load_sample(sample_id, crop_seed)`` to avoid
decoding the same file twice; with a fresh random crop per draw the key is
new every time, the cache never hits and keeps every cropped array. Fix from
the PR: ``functools.lru_cache(maxsize=...)``, which bounds what is kept (here
256 entries, full after 256 steps).

Here: the decorator is the common closure form (a dict in the enclosing
scope); one 32 x 32 float32 crop (4 KiB) is loaded per step and fed to a numpy
logistic-regression step.

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +21.0 MiB RSS from 20 % of the run to the end (~4.5 KiB per step),
fixed +0.8 MiB (the 256-entry cache is full after 5 % of the run); ~0.18 ms a step.
"""
import functools

import numpy as np

SOURCE = "https://github.com/apache/superset/pull/17319"
SLICE = "holdout3"
STEPS = 6000
PER_STEP = 1
N_SAMPLES = 500
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "tuple", "dict"],
              "holder_any": ["cache", "memoized"]},
    "fixed": {"verdict_not": "leak"},
}


def memoized(func):
    """The project's decorator: results kept in a dict in the closure, keyed by the arguments."""
    cache = {}

    @functools.wraps(func)
    def wrapper(*args):
        try:
            return cache[args]
        except KeyError:
            value = cache[args] = func(*args)
            return value
    return wrapper


_BASE = np.random.default_rng(0).random((N_SAMPLES, 40, 40), dtype=np.float32)


def _load_sample(sample_id, crop_seed):
    """Stands in for decoding a file and taking a random 32 x 32 crop of it."""
    r = (crop_seed * 2654435761) % 2**32
    i, j = r % 9, (r >> 8) % 9
    return np.ascontiguousarray(_BASE[sample_id, i:i + 32, j:j + 32])


load_sample_leaky = memoized(_load_sample)
load_sample_fixed = functools.lru_cache(maxsize=256)(_load_sample)


def _loop(monitor, steps, load):
    rng = np.random.default_rng(1)
    w = np.zeros(32 * 32, dtype=np.float32)
    for step in range(steps):
        ids = rng.integers(0, N_SAMPLES, size=PER_STEP)
        seeds = rng.integers(0, 2**31, size=PER_STEP)
        x = np.stack([load(int(i), int(s)).ravel() for i, s in zip(ids, seeds)])
        y = (ids % 2).astype(np.float32)
        p = 1.0 / (1.0 + np.exp(-(x @ w)))
        w -= 0.01 * (x.T @ (p - y)) / len(y)
        monitor.sample(step)


def leaky(monitor, steps):
    _loop(monitor, steps, load_sample_leaky)


def fixed(monitor, steps):
    _loop(monitor, steps, load_sample_fixed)
