"""A child logger made with ``getChild`` for every data shard stays in the logging module's registry forever (no TensorFlow).

Source: tarasko/picows#72 "Possible memory leak using getLogger"
(``logging.getLogger`` / ``.getChild`` instances "are cached and never got
gc collected. New logger created on for every connection and they never got
deleted from the memory"; the reproduction counts 102 live ``Logger``
objects after ``gc.collect()``), the same as DIRACGrid/DIRAC#5280 (a
sub-logger per call, "the memory raises quickly") and
github/annotated-logger#83 (a logger per decorated call left in
``logging.root.manager.loggerDict``). Fix from the issue: make the
per-connection logger with ``logging.Logger(name)`` and set its ``parent``,
so it is never registered and goes away with its owner.
Summary: a streaming data loader opens one shard file per training step and
gives each shard reader its own child logger (``loader.shard-000123``) so
that its log lines say where they come from; every such logger is kept by
the logging manager after the shard is done.

Here: a 256 x 16 float32 shard decoded per step and one least-squares SGD
step in numpy; the shard reader logs at DEBUG (disabled), as most readers
do in production. A small, slow leak: one ``Logger`` (~0.7 KiB with its
``__dict__``, name and registry slot) a step.

Checked without tb-leak (psutil RSS, gc objects, tracemalloc, fresh
process, Python 3.11, numpy 2.4): leaky +20.8 MiB RSS from 20 % of the run
to the end (~0.7 KiB per step; +3 gc-tracked objects a step, tracemalloc
+18.2 MiB), fixed +0.7 MiB (gc objects flat, tracemalloc +0.5 MiB: the
checker's own sample arrays); ~0.15 ms a step.
"""
import logging
import os

# Single-threaded BLAS: on 2 shared cores, OpenBLAS worker threads spinning next to other
# threads make each small matmul up to ~10x slower.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/tarasko/picows/issues/72"
SLICE = "holdout5"
STEPS = 40000
ROWS = 256
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Logger", "dict", "str"],
              "holder_any": ["loggerDict", "manager", "logging"]},
    "fixed": {"verdict_not": "leak"},
}

LOG = logging.getLogger("loader")


class ShardReader:
    def __init__(self, shard_id, registered=True):
        name = "shard-%06d" % shard_id
        if registered:
            self.log = LOG.getChild(name)             # registered in logging.root.manager.loggerDict
        else:
            self.log = logging.Logger("%s.%s" % (LOG.name, name))   # the fix: not registered
            self.log.parent = LOG
        self.shard_id = shard_id

    def read(self, true_w):
        rng = np.random.default_rng(self.shard_id)
        raw = rng.integers(-2 ** 15, 2 ** 15, size=(ROWS, 16), dtype=np.int16)
        x = raw.astype(np.float32) / 2 ** 15
        y = x @ true_w + 0.01 * rng.standard_normal(ROWS).astype(np.float32)
        self.log.debug("decoded %d rows from shard %d", ROWS, self.shard_id)
        return x, y


def _train(monitor, steps, registered):
    true_w = np.linspace(-1, 1, 16).astype(np.float32)
    w = np.zeros(16, dtype=np.float32)
    for step in range(steps):
        x, y = ShardReader(step, registered).read(true_w)
        err = x @ w - y
        w -= 0.1 * x.T @ err / ROWS
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, registered=True)


def fixed(monitor, steps):
    _train(monitor, steps, registered=False)
