"""``itertools.cycle`` over a data loader for an endless training stream (no TensorFlow).

Source: pytorch/pytorch#23900 "Memory leak when using itertools.cycle".
Summary: ``itertools.cycle(loader)`` is used to get an infinite iterator, but
``cycle`` saves a copy of every element it yields during the first pass so that
it can replay them; with a loader that decodes/augments batches on the fly the
whole first epoch ends up held in memory, growing batch by batch. Fix from the
thread: a generator that re-iterates the loader,
``while True: for batch in loader: yield batch``.

Here: a loader over 6000 batches of 32 x 64 float32 (8 KiB), freshly augmented
each time; the run covers only part of the first epoch, as in the report.

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +20.2 MiB RSS from 20 % of the run to the end (+20.0 MiB of
Python-traced memory, tracemalloc), fixed +0.0 MiB; ~0.15 ms a step.
"""
import itertools

import numpy as np

SOURCE = "https://github.com/pytorch/pytorch/issues/23900"
SLICE = "holdout2"
STEPS = 3000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "tuple", "cycle"]},
    "fixed": {"verdict_not": "leak"},
}


class Loader:
    """Iterable like a DataLoader: each pass decodes and augments every batch anew."""

    def __init__(self, n_batches=6000, seed=0):
        self.n_batches = n_batches
        self.seed = seed
        self.epoch = 0

    def __iter__(self):
        rng = np.random.default_rng(self.seed + self.epoch)
        self.epoch += 1
        for i in range(self.n_batches):
            x = rng.standard_normal((32, 64), dtype=np.float32)
            y = rng.integers(0, 4, size=32)
            yield x, y


def _forever(loader):
    while True:
        for batch in loader:
            yield batch


def _train(monitor, steps, stream):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 4)).astype(np.float32) * 0.01
    for step, (x, y) in zip(range(steps), stream):
        logits = x @ w
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(len(y)), y] -= 1.0
        w -= 0.01 * x.T @ p / len(y)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, itertools.cycle(Loader()))


def fixed(monitor, steps):
    _train(monitor, steps, _forever(Loader()))
