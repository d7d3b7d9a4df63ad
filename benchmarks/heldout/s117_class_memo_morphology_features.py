"""A feature extractor memoizes per-morphology measurements in a cache that is a *class* attribute, keyed by the morphology object, so every morphology streamed through training stays alive with its cached arrays after the loop has moved on (no TensorFlow; small and slow).

Source: BlueBrain/NeuroM#666 "memoization behaviour prevents memory to be
released" ("memoization in NeuroM involves a class variable ... When
accessing properties on a lot of morphologies sequentially, even though
we don't reference the morphology anymore, properties are still stored in
that cache. The consequence is that memory keeps growing even if we
actually needs only 1 morphology at a time"; fixed in #667 by attaching
the cache to the morphology), and iiasa/ixmp4#25 ("the wrapped function and
its cache persists across class instances and will not be garbage
collected ... fixes that by moving the cache construction to the classes
``__init__``"). Fix, from #667: the memo lives on the morphology object
(``obj._memo``), so it goes when the morphology goes.
Summary: a numpy regressor predicts a neuron's class from shape
statistics. Each step loads a new reconstructed morphology (a few dozen
sections of 3-D points, one float32 array), computes section lengths, branch orders and a
path-length histogram through ``@memoize``-decorated functions, and
trains on them. The decorator stores results in ``Memoizer._cache``, a
dict on the class keyed by ``(function name, morphology)``: every
morphology object and its small result arrays are kept for the whole run.

Here: morphologies of 12-20 sections of 6 points each, features of 3 x
16 numbers (8 jittered copies a step), a 48-256-10 numpy MLP. The fixed twin keeps the memo on
the morphology.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky
87.1 / 137.9 / 287.6 MiB RSS at 20 % / 40 % / end (~2.5 KiB a step) and
gc objects 103,511 / 183,511 / 423,507 (+4 a step: the morphology, its
``__dict__`` and the cache keys), fixed 36.5 / 36.5 / 36.5 MiB with
objects flat (23,508); ~0.1 ms a step (10.5 s leaky, 9.9 s fixed for
100,000 steps).
"""
import functools
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/BlueBrain/NeuroM/issues/666"
SLICE = "holdout10"
STEPS = 100000
CLASSES = 10
BINS = 16
HIDDEN = 256
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Morphology", "Section", "ndarray", "numpy", "tuple", "dict"],
              "holder_any": ["_cache", "Memoizer"]},
    "fixed": {"verdict_not": "leak"},
}


class Memoizer:
    _cache = {}                                  # the leak: one dict on the class for every morphology
    per_object = False

    @classmethod
    def memoize(cls, fn):
        @functools.wraps(fn)
        def wrapper(morph):
            if cls.per_object:                   # the fix (#667): the memo lives on the morphology
                memo = morph.__dict__.setdefault("_memo", {})
                key = fn.__name__
            else:
                memo = cls._cache
                key = (fn.__name__, morph)
            if key not in memo:
                memo[key] = fn(morph)
            return memo[key]
        return wrapper


class Morphology:
    def __init__(self, rng, label):
        n = int(rng.integers(12, 21))
        scale = 1.0 + 0.15 * label
        self.label = label
        self.points = np.cumsum(rng.normal(scale=scale, size=(n, 6, 3)), 1).astype(np.float32)   # sections x points
        self.orders = rng.integers(0, 6, n)


@Memoizer.memoize
def section_lengths(morph):
    return np.linalg.norm(np.diff(morph.points, axis=1), axis=2).sum(1)


@Memoizer.memoize
def branch_orders(morph):
    return np.bincount(morph.orders, minlength=BINS)[:BINS].astype(np.float32)


@Memoizer.memoize
def path_length_hist(morph):
    return np.histogram(section_lengths(morph), bins=BINS, range=(0, 40))[0].astype(np.float32)


def _features(morph):
    lengths = section_lengths(morph)
    stats = np.zeros(BINS, np.float32)
    stats[:4] = lengths.mean(), lengths.std(), lengths.max(), len(lengths) / 20.0
    return np.concatenate([stats, branch_orders(morph) / 10.0, path_length_hist(morph) / 10.0])


def _train(monitor, steps, per_object):
    Memoizer._cache = {}
    Memoizer.per_object = per_object
    rng = np.random.default_rng(0)
    w1 = (rng.normal(size=(3 * BINS, HIDDEN)) * 0.1).astype(np.float32)
    w2 = np.zeros((HIDDEN, CLASSES), np.float32)
    for step in range(steps):
        label = int(rng.integers(CLASSES))
        morph = Morphology(rng, label)
        x = np.repeat(_features(morph)[None, :], 8, 0) + rng.normal(scale=0.01, size=(8, 3 * BINS)).astype(np.float32)
        h = np.maximum(x @ w1, 0.0)
        z = h @ w2
        z -= z.max(1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(1, keepdims=True)
        p[:, label] -= 1.0
        gh = (p @ w2.T) * (h > 0)
        w2 -= 0.01 * h.T @ p / 8
        w1 -= 0.01 * x.T @ gh / 8
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, per_object=False)


def fixed(monitor, steps):
    _train(monitor, steps, per_object=True)
