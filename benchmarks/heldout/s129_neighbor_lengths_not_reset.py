"""A cached neighbour search for a particle model rebuilds its neighbour lists at every update but appends each update's per-particle neighbour counts to the cached ``lengths`` list instead of resetting it; the results stay right (offsets are taken from the last block), so only memory shows it: one Python list grows by a few KiB a step while the number of objects the collector sees stays flat (no TensorFlow).

Source: pypr/pysph#178 "BUG: Fix massive leak with caching nnps."
("This fixes a massive leak when caching nnps results. Earlier, the
memory usage would grow without bound because the neighbor lengths were
not reset on each update. This is now fixed and caching is very
efficient."). Fix, as in the PR: reset the cached lengths on every
update.
Summary: a learned interaction model (a numpy regressor on neighbour-
averaged features, in the spirit of graph networks for particle
simulations) is trained on random particle clouds. ``NeighborCache.update``
finds, for 512 particles, the neighbours within a radius, stores the flat
neighbour index array (replaced every update) and extends
``self.lengths`` with the 512 counts; ``offsets()`` uses the last block.
The counts are small ``int``s (CPython's cached small integers), so the
only growing object is the list itself: ~4 KiB a step, none of it new
objects.

Here: 512 particles in 3-D, radius 0.12 in the unit cube, 8 features
per particle, a linear readout trained with SGD. The fixed twin resets
``self.lengths`` in ``update``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky 44.3 / 47.6 /
57.8 MiB RSS at 20 % / 40 % / end (~4.2 KiB a step) with gc objects flat
(23,810); fixed 41.1 / 41.1 / 41.1 MiB, objects flat (23,810); ~5.3 ms a
step (21.2 s leaky, 21.4 s fixed for 4,000 steps).
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/pypr/pysph/pull/178"
SLICE = "holdout11"
STEPS = 4000
PARTICLES = 512
FEATURES = 8
RADIUS = 0.12
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["list", "int", "NeighborCache", "native"],
              "holder_any": ["lengths", "NeighborCache", "cache"]},
    "fixed": {"verdict_not": "leak"},
}


class NeighborCache:
    def __init__(self, reset_each_update):
        self.reset_each_update = reset_each_update
        self.lengths = []
        self.neighbors = np.zeros(0, np.int32)
        self.n = 0

    def update(self, pos):
        d2 = ((pos[:, None, :] - pos[None, :, :]) ** 2).sum(-1)
        mask = d2 < RADIUS * RADIUS
        np.fill_diagonal(mask, False)
        counts = mask.sum(1)
        if self.reset_each_update:
            self.lengths = counts.tolist()              # the fix: reset on every update
        else:
            self.lengths.extend(counts.tolist())        # the leak: never reset
        self.neighbors = np.nonzero(mask)[1].astype(np.int32)
        self.n = len(pos)
        return mask

    def offsets(self):
        block = np.asarray(self.lengths[-self.n:])
        return np.concatenate([[0], np.cumsum(block)])


def _train(monitor, steps, reset_each_update):
    rng = np.random.default_rng(0)
    cache = NeighborCache(reset_each_update)
    w = np.zeros((2 * FEATURES, 1), np.float32)
    true_w = rng.normal(size=(2 * FEATURES, 1)).astype(np.float32)
    for step in range(steps):
        pos = rng.random((PARTICLES, 3), dtype=np.float32)
        feats = rng.standard_normal((PARTICLES, FEATURES), dtype=np.float32)
        mask = cache.update(pos)
        off = cache.offsets()
        counts = np.diff(off).astype(np.float32)
        agg = (mask.astype(np.float32) @ feats) / np.maximum(counts, 1.0)[:, None]
        x = np.concatenate([feats, agg], 1)
        target = x @ true_w
        err = x @ w - target
        w -= 0.01 * (x.T @ err) / PARTICLES
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, reset_each_update=False)


def fixed(monitor, steps):
    _train(monitor, steps, reset_each_update=True)
