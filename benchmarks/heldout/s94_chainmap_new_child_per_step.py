"""A trainer layers each step's scheduled overrides onto its config with ``ChainMap.new_child()`` and never pops them, so the chain grows by one small dict a step and lookups of base keys get slower (no TensorFlow; a small, slow leak).

Source: angr/angr#1847 "Replace cooldict dependency with
collections.ChainMap" (each state copy called ``new_child()``; "it looks
like this can result in an infinite recursion error"; "the ChainMap is
getting too recursively deep ... I think that there is something very
clearly wrong that we are managing potentially 1000s of dictionaries,
which seriously degrades read speeds since we need to iterate until we find
a dictionary with the key"). Fix, as the thread settled: do not let the
chain grow with every copy, "flatten it" (or, for a scope, pop the child
with ``.parents`` when it ends, the ``Context.push()/pop()`` pairing the
``ChainMap`` docs describe).
Summary: a numpy training loop reads its settings from ``self.cfg``, a
``ChainMap`` over the base config. Each step the schedulers put that
step's values (learning rate, per-layer rate multipliers, augmentation
settings, label smoothing, the step number) in front with ``self.cfg = self.cfg.new_child({...})``, meant as a
per-step scope, but the matching ``self.cfg = self.cfg.parents`` was
lost in a refactor. Every step's override dict (~0.6 KiB with its
array and nested dict) stays in ``self.cfg.maps``, and every read of a
base key (weight decay, clip norm, read every 200 steps) walks the whole
chain.

Here: a 128-64-1 numpy MLP on minibatches of 32 (~0.2 ms a step). The fixed twin pops the
step's child at the end of the step (a ``try``/``finally`` scope).

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky +17.4 MiB RSS
from 20 % of the run to the end (~0.74 KiB a step; +1.0 gc-tracked object
a step, the override dicts: 29,736 / 35,737 / 53,611 objects at 20 % / 40
% / end) and a step time growing from ~0.3 ms to ~1.5 ms as every
``new_child`` copies the chain and base-key reads walk it (25.5 s for
30,000 steps), fixed +0.16 MiB with objects flat at 23,826, ~0.3 ms a step
(9.4 s).
"""
import math
import os
from collections import ChainMap

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/angr/angr/pull/1847"
SLICE = "holdout8"
STEPS = 30000
REG_EVERY = 200      # steps between reads of the base regularisation settings
FEATURES = 128
HIDDEN = 64
BATCH = 32
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["dict", "ChainMap", "float"],
              "holder_any": ["cfg", "maps", "Trainer"]},
    "fixed": {"verdict_not": "leak"},
}


class Trainer:
    def __init__(self, steps, pop_scope):
        self.steps = steps
        self.pop_scope = pop_scope
        self.cfg = ChainMap({"lr": 0.05, "weight_decay": 1e-4, "clip_norm": 5.0, "label_smoothing": 0.0,
                             "layer_lr": np.ones(2), "augment": {"mixup_alpha": 0.0, "noise": 0.0},
                             "step": 0})
        rng = np.random.default_rng(0)
        self.rng = rng
        self.w1 = rng.normal(size=(FEATURES, HIDDEN)) * 0.1
        self.w2 = rng.normal(size=HIDDEN) * 0.1
        self.true_w = rng.normal(size=FEATURES)
        self.clip_norm, self.wd = 5.0, 1e-4

    def scheduled(self, step):
        warm = min(1.0, (step + 1) / 500)
        cos = 0.5 * (1 + math.cos(math.pi * step / self.steps))
        return {"lr": 0.05 * warm * cos, "layer_lr": np.array([1.0, 0.5 + 0.5 * cos]),
                "augment": {"mixup_alpha": 0.2 * (step > self.steps // 3), "noise": 0.05 * cos},
                "label_smoothing": 0.1 * cos, "step": step}

    def train_step(self):
        cfg = self.cfg
        x = self.rng.normal(size=(BATCH, FEATURES))
        y = (x @ self.true_w > 0).astype(np.float64)
        y = y * (1 - cfg["label_smoothing"]) + 0.5 * cfg["label_smoothing"]
        aug = cfg["augment"]
        x = x + aug["noise"] * self.rng.normal(size=x.shape)
        if aug["mixup_alpha"] > 0:
            lam = self.rng.beta(aug["mixup_alpha"], aug["mixup_alpha"])
            perm = self.rng.permutation(BATCH)
            x, y = lam * x + (1 - lam) * x[perm], lam * y + (1 - lam) * y[perm]
        h = np.tanh(x @ self.w1)
        p = 1 / (1 + np.exp(-(h @ self.w2)))
        g = (p - y) / BATCH
        g2 = h.T @ g
        g1 = x.T @ (np.outer(g, self.w2) * (1 - h * h))
        if cfg["step"] % REG_EVERY == 0:                             # base keys: walk the whole chain
            self.clip_norm, self.wd = cfg["clip_norm"], cfg["weight_decay"]
        norm = math.sqrt(float((g1 * g1).sum() + (g2 * g2).sum()))
        scale = min(1.0, self.clip_norm / (norm + 1e-12))
        lr, layer_lr = cfg["lr"], cfg["layer_lr"]
        self.w1 -= lr * layer_lr[0] * (scale * g1 + self.wd * self.w1)
        self.w2 -= lr * layer_lr[1] * (scale * g2 + self.wd * self.w2)

    def run(self, monitor):
        for step in range(self.steps):
            self.cfg = self.cfg.new_child(self.scheduled(step))     # this step's scope
            try:
                self.train_step()
            finally:
                if self.pop_scope:                                   # the fix: end the scope
                    self.cfg = self.cfg.parents
            monitor.sample(step)


def leaky(monitor, steps):
    Trainer(steps, pop_scope=False).run(monitor)


def fixed(monitor, steps):
    Trainer(steps, pop_scope=True).run(monitor)
