"""A per-sample loss histogram keyed by rounded float losses gains a new key for every NaN once a corrupted shard enters the stream, because no two NaN floats are equal (no TensorFlow; late onset, small).

Source: Chris Siebenmann, "Python dictionaries and floating point NaNs as
keys" (2022): a NaN key can only be found again through the very same
float object, so ``d[float('nan')]`` lookups miss and every freshly
computed NaN becomes another entry, ``{nan: 'Help', nan: 'Me'}``; the
Stack Overflow question "NaNs as key in dictionaries" (6441857) shows the
same multiplying entries. Fix (the answers' advice: never use a NaN as a
key): count NaNs under one sentinel key (``math.isnan`` before rounding).
Summary: a numpy trainer keeps ``self.loss_histogram``, a ``Counter`` of
per-sample losses rounded to 0.01, for a loss-distribution dashboard. It
has a few hundred keys and stays small while training is healthy. From
35 % of the run the stream enters a shard in which some rows have
corrupted (NaN) features; the step masks those rows out of the gradient,
so training carries on, but their losses are NaN, ``round(nan, 2)`` is a
new float each time, and each one becomes a new key that no later NaN
ever matches.

Here: batches of 64 rows of 32 features, ~6 NaN rows a batch after the
onset, a 32-16-1 numpy MLP. Only the histogram dict grows (floats are not
tracked by the garbage collector, so gc object counts stay flat); it grows
in steps as the dict resizes. The fixed twin counts NaNs under ``"nan"``.

Checked without tb-leak (psutil RSS, gc objects, tracemalloc; fresh
process, Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky
flat before the corrupted shard, then +19.9 MiB RSS from 20 % of the run
to the end (~0.4 KiB per step after the onset, in steps of growing size as
the dict resizes; tracemalloc +17.2 MiB), gc object counts flat; fixed
+0.25 MiB RSS (tracemalloc +0.07 MiB); ~0.25 ms a step (18-22 s; ~32 s
under the runner).
"""
import collections
import math
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://utcc.utoronto.ca/~cks/space/blog/python/DictsAndNaNKeys"
SLICE = "holdout7"
STEPS = 80000
CORRUPT_FROM = 0.35        # fraction of the run before the corrupted shard
BATCH = 64
FEATURES = 32
HIDDEN = 16
NAN_ROWS = 6               # corrupted rows per batch after the onset
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["dict", "Counter", "float"],
              "holder_any": ["loss_histogram", "Trainer"]},
    "fixed": {"verdict_not": "leak"},
}


class Trainer:
    def __init__(self, rng, nan_sentinel):
        self.w1 = rng.standard_normal((FEATURES, HIDDEN)) * 0.2
        self.w2 = np.zeros(HIDDEN)
        self.nan_sentinel = nan_sentinel
        self.loss_histogram = collections.Counter()      # rounded per-sample loss -> count

    def record_losses(self, losses):
        for v in losses.tolist():
            if self.nan_sentinel and math.isnan(v):
                self.loss_histogram["nan"] += 1           # the fix: one key for all NaNs
            else:
                self.loss_histogram[round(v, 2)] += 1     # round(nan, 2) is a new NaN each time

    def step(self, x, y):
        ok = ~np.isnan(x).any(axis=1)                     # mask corrupted rows out of the update
        h = np.tanh(x @ self.w1)
        p = 1.0 / (1.0 + np.exp(-(h @ self.w2)))
        with np.errstate(invalid="ignore", divide="ignore"):
            losses = -(y * np.log(p + 1e-9) + (1 - y) * np.log(1 - p + 1e-9))
        g = np.where(ok, p - y, 0.0) / max(1, int(ok.sum()))
        hk = np.where(ok[:, None], h, 0.0)
        xk = np.where(ok[:, None], x, 0.0)
        self.w2 -= 0.5 * hk.T @ g
        self.w1 -= 0.5 * xk.T @ (np.outer(g, self.w2) * (1 - hk * hk))
        self.record_losses(losses)


def _train(monitor, steps, nan_sentinel):
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(FEATURES)
    trainer = Trainer(rng, nan_sentinel)
    corrupt_from = int(steps * CORRUPT_FROM)
    for step in range(steps):
        x = rng.standard_normal((BATCH, FEATURES))
        y = (x @ w_true > 0).astype(np.float64)
        if step >= corrupt_from:
            x[rng.choice(BATCH, NAN_ROWS, replace=False), rng.integers(0, FEATURES)] = np.nan
        trainer.step(x, y)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, nan_sentinel=False)


def fixed(monitor, steps):
    _train(monitor, steps, nan_sentinel=True)
