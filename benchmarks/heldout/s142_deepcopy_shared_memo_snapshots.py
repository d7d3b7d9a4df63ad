"""A trainer snapshots its training state every step with ``copy.deepcopy(state, self._memo)``, passing one long-lived memo dict so that the large, immutable run configuration is shared by all snapshots instead of copied; but ``deepcopy`` also records every object it copies in that memo and appends each original to the memo's keep-alive list, so every step's state (with its batch-statistics arrays) stays alive although only the last eight snapshots are kept (no TensorFlow).

Source: python/cpython#123745 "Improve performance of deepcopy by
setting keep alive key in the memo", which documents the memo's layout:
``deepcopy`` stores ``memo[id(x)] = copy`` for every copied object and
"``_keep_alive``" appends each original to the list at
``memo[id(memo)]``; the ``copy`` docs say the memo "should be treated as
an opaque object". Fix used
here: a fresh memo per snapshot, seeded only with the objects meant to
be shared (``{id(config): config}``).
Summary: a numpy autoencoder keeps a ring of the last eight state
snapshots (weights' running norms, the step's per-feature mean and
variance, RNG state) for rollback on a loss spike; the shared memo keeps
every snapshot's originals and copies for the whole run.

Here: batches of 1,024 x 96 float32, a 96-32-96 linear autoencoder,
per-step statistics of ~1.5 KiB plus a few dicts. The fixed twin seeds
a new memo with the config each time.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky
58.4 / 78.5 / 100.5 / 119.2 / 138.0 MiB RSS at 20 / 40 / 60 / 80 % / end
(~4 KiB a step) with gc objects 43,623 / 63,518 / 83,519 / 103,519 /
123,514 (four a step), 13.7 s for 25,000 steps; fixed 38.1 MiB
throughout with objects flat (23,645 -> 23,650), 13.2 s.
"""
import collections
import copy
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/python/cpython/issues/123745"
SLICE = "holdout12"
STEPS = 25000
BATCH = 1024
DIM = 96
CODE = 32
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "dict", "list", "float"],
              "holder_any": ["_memo", "memo", "Snapshotter"]},
    "fixed": {"verdict_not": "leak"},
}


class Snapshotter:
    def __init__(self, config, shared_memo):
        self.config = config
        self.ring = collections.deque(maxlen=8)
        self.shared_memo = shared_memo
        self._memo = {id(config): config}

    def snapshot(self, state):
        if self.shared_memo:
            memo = self._memo                      # the leak: one memo for the whole run
        else:
            memo = {id(self.config): self.config}  # the fix: a fresh memo, seeded with what is shared
        self.ring.append(copy.deepcopy(state, memo))


def _train(monitor, steps, shared_memo):
    rng = np.random.default_rng(0)
    config = {"layers": [DIM, CODE, DIM], "lr": 0.002, "notes": "x" * 20000,
              "vocab": {("tok%d" % i): i for i in range(2000)}}
    snaps = Snapshotter(config, shared_memo)
    enc = (rng.normal(size=(DIM, CODE)) * 0.1).astype(np.float32)
    dec = (rng.normal(size=(CODE, DIM)) * 0.1).astype(np.float32)
    basis = (rng.normal(size=(8, DIM)) * 0.3).astype(np.float32)
    for step in range(steps):
        x = rng.standard_normal((BATCH, 8), dtype=np.float32) @ basis
        h = x @ enc
        err = h @ dec - x
        g_dec = h.T @ err / BATCH
        g_enc = x.T @ (err @ dec.T) / BATCH
        dec -= config["lr"] * g_dec
        enc -= config["lr"] * g_enc
        state = {"step": step, "config": config, "loss": float(np.mean(err ** 2)),
                 "stats": {"mean": x.mean(0), "var": x.var(0), "code_mean": h.mean(0)},
                 "norms": [float(np.linalg.norm(enc)), float(np.linalg.norm(dec))]}
        snaps.snapshot(state)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, shared_memo=True)


def fixed(monitor, steps):
    _train(monitor, steps, shared_memo=False)
