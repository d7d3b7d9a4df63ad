"""``functools`` cache on an instance method pins every instance (no TensorFlow).

Source: "How can I use functools.lru_cache inside classes without leaking
memory?" (Stack Overflow 33672412; flake8-bugbear B019; the Python FAQ "How do I
cache method calls?").
Summary: decorating a method caches on ``(self, args)``, so the class-level cache
holds a strong reference to every instance (and everything it owns) for the life
of the process. Fixes from the answers: cache on the immutable inputs at module
level with a bounded ``lru_cache`` instead of on ``self``. Here that bounded
cache of result arrays fills to its 256 entries early, then stays flat.
"""
import functools

import numpy as np

SOURCE = "https://stackoverflow.com/questions/33672412"
SLICE = "holdout"
STEPS = 2500
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Featurizer", "ndarray", "numpy"]},
    "fixed": {"verdict_not": "leak"},
}

_PROJ = np.random.default_rng(1).standard_normal((64, 16)).astype(np.float32)


class Featurizer:
    """Wraps one raw record (32 x 64 float32, 8 KiB) and computes its features."""

    def __init__(self, record_id, raw):
        self.record_id = record_id
        self.raw = raw

    @functools.lru_cache(maxsize=None)
    def features(self, scale):
        return np.tanh(self.raw @ _PROJ) * scale


@functools.lru_cache(maxsize=256)
def _features(record_id, scale):
    raw = np.random.default_rng(record_id).standard_normal((32, 64), dtype=np.float32)
    return np.tanh(raw @ _PROJ) * scale


class FixedFeaturizer:
    def __init__(self, record_id):
        self.record_id = record_id

    def features(self, scale):
        return _features(self.record_id, scale)


def leaky(monitor, steps):
    for step in range(steps):
        raw = np.random.default_rng(step).standard_normal((32, 64), dtype=np.float32)
        f = Featurizer(step, raw)
        _ = float(f.features(1.0).sum() + f.features(1.0).mean())   # second call hits the cache
        monitor.sample(step)


def fixed(monitor, steps):
    for step in range(steps):
        f = FixedFeaturizer(step)
        _ = float(f.features(1.0).sum() + f.features(1.0).mean())
        monitor.sample(step)
