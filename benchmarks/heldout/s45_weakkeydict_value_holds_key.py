"""A ``WeakKeyDictionary`` of per-batch statistics whose values point back at their batch (no TensorFlow).

Source: python/cpython#88846 (bpo-44680) "Reference cycles from a
WeakKeyDictionary value to its key aren't collected" (the dictionary holds
its values strongly; a value that references its own key keeps the key
alive, so the weak entry never goes away, and the garbage collector cannot
break the cycle because the dictionary itself is reachable); the same leak
in nengo/nengo#1089 "Memory leak in parameter system" (values of a
long-lived weak-keyed dict kept alive across simulations). Fix used here:
the advice in that thread, values must not refer to their key; the value
keeps only the numbers it needs.
Summary: a data loader records per-batch statistics (mean, std, count) for a
drift monitor in a module-level ``WeakKeyDictionary`` keyed by the batch,
"so entries disappear with their batch". The stats object also keeps a
reference to its batch (to recompute on demand), so no batch is ever freed.

Here: a numpy logistic-regression step on an 8 x 16 float32 batch (512 B of
data, ~1 KiB a step with the objects around it). A small, slow leak.

Checked without tb-leak (psutil RSS, fresh process, Python 3.11, numpy
2.4): leaky +50.0 MiB RSS from 20 % of the run to the end (~1.3 KiB per step),
fixed +0.1 MiB; ~0.13 ms a step.
"""
import weakref

import os

# Single-threaded BLAS: on 2 shared cores, OpenBLAS worker threads spinning next to other
# threads make each small matmul up to ~10x slower.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/python/cpython/issues/88846"
SLICE = "holdout4"
STEPS = 50000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Batch", "BatchStats", "ndarray", "numpy"],
              "holder_any": ["_BATCH_STATS", "WeakKeyDictionary", "data"]},
    "fixed": {"verdict_not": "leak"},
}

_BATCH_STATS = weakref.WeakKeyDictionary()


class Batch:
    def __init__(self, index, x, y):
        self.index = index
        self.x = x
        self.y = y


class BatchStats:
    """As in the report: the value keeps its key (the batch) alive."""

    def __init__(self, batch):
        self.batch = batch
        self.mean = float(batch.x.mean())
        self.std = float(batch.x.std())

    def recompute(self):
        return float(self.batch.x.mean())


class NumbersOnlyStats:
    """The fix: only numbers, no reference back to the batch."""

    def __init__(self, batch):
        self.index = batch.index
        self.mean = float(batch.x.mean())
        self.std = float(batch.x.std())


def _loader(rng, w_true):
    index = 0
    while True:
        x = rng.standard_normal((8, 16)).astype(np.float32)
        y = (x @ w_true > 0).astype(np.float32)
        yield Batch(index, x, y)
        index += 1


def _train(monitor, steps, stats_cls):
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(16).astype(np.float32)
    w = np.zeros(16, dtype=np.float32)
    batches = _loader(rng, w_true)
    drift = 0.0
    for step in range(steps):
        batch = next(batches)
        _BATCH_STATS[batch] = stats_cls(batch)
        drift = 0.99 * drift + 0.01 * _BATCH_STATS[batch].mean
        p = 1.0 / (1.0 + np.exp(-np.clip(batch.x @ w, -30.0, 30.0)))
        w -= 0.1 * batch.x.T @ (p - batch.y) / 8
        del batch
        monitor.sample(step)
    _BATCH_STATS.clear()


def leaky(monitor, steps):
    _train(monitor, steps, BatchStats)


def fixed(monitor, steps):
    _train(monitor, steps, NumbersOnlyStats)
