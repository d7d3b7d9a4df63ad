"""A hyper-parameter search records each trial's data provenance (which shard files the trial opened) with ``sys.addaudithook``, installing a new hook, a closure over the trial's record, at the start of every trial; audit hooks can never be removed, so every finished trial's hook keeps its record (validation predictions and the list of files it read) alive, and every later ``open`` calls all of them (no TensorFlow; held from the interpreter, grows once a trial).

Source: python/cpython PR #12613 "bpo-36842: Implement PEP 578"
(``sys.addaudithook`` appends to the interpreter's hook list; the PEP's
text: hooks "cannot be removed or replaced", and the review thread
discusses clearing them only at finalization). Fix used here (what the
PEP leaves a program to do): install one hook for the whole run that
forwards to the *current* trial's recorder through a slot the search
clears when the trial's report is written, so a trial's record is freed
with the trial.
Summary: each trial trains a small classifier with its own learning
rate for 40 steps on shards read with ``np.load`` (an audited ``open``),
then keeps its validation probabilities on the trial record for the
report and moves on.

Here: 16 shards of 256 x 32 float32 features on disk, a 32-64-8 MLP in
numpy, 40 steps a trial (1,250 trials), 2,000 x 8 float32 validation
probabilities (62.5 KiB) on each record. The fixed twin's single hook
forwards to the live trial only.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky
54.7 / 72.2 / 89.7 / 107.1 / 124.6 MiB RSS at 20 / 40 / 60 / 80 % / end
(~70 KiB a trial, in a step every 40) with gc objects 25,622 / 27,092 /
28,551 / 28,965 / 30,424 (the hook, its cell, the record, its list of
paths), 13.3 s for 50,000 steps, the step time growing from ~0.18 to
~0.36 ms as every ``open`` calls every hook; fixed 37.3 / 37.3 / 37.3 /
37.4 / 37.4 MiB with objects 24,484 / 24,693 / 24,902 / 25,232 / 25,441
(uncollected cyclic garbage of numpy's loader: flat after
``gc.collect()``), 7.6 s.
"""
import os
import sys
import tempfile

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/python/cpython/pull/12613"
SLICE = "holdout13"
STEPS = 50000
STEPS_PER_TRIAL = 40
SHARDS = 16
ROWS = 256
FEATURES = 32
HIDDEN = 64
CLASSES = 8
VAL_ROWS = 2000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["TrialRecord", "function", "cell", "ndarray", "list", "str"]},
    "fixed": {"verdict_not": "leak"},
}


class TrialRecord:
    def __init__(self, trial, lr):
        self.trial, self.lr = trial, lr
        self.opened = []
        self.active = True
        self.val_probs = None


def _per_trial_hook(record):
    def hook(event, args):                         # the leak: one hook a trial, never removable
        if record.active and event == "open" and isinstance(args[0], str) and args[0].endswith(".npy"):
            record.opened.append(args[0])
    sys.addaudithook(hook)


_current = [None]                                  # the fix: one hook, forwarding to the live trial


def _forwarding_hook(event, args):
    record = _current[0]
    if record is not None and event == "open" and isinstance(args[0], str) and args[0].endswith(".npy"):
        record.opened.append(args[0])


def _write_shards(root, rng, centers):
    for s in range(SHARDS):
        y = rng.integers(0, CLASSES, ROWS)
        x = centers[y] + rng.standard_normal((ROWS, FEATURES), dtype=np.float32)
        np.save(os.path.join(root, "shard-%02d-x.npy" % s), x)
        np.save(os.path.join(root, "shard-%02d-y.npy" % s), y)


def _train(monitor, steps, one_hook):
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    val_y = rng.integers(0, CLASSES, VAL_ROWS)
    val_x = centers[val_y] + rng.standard_normal((VAL_ROWS, FEATURES), dtype=np.float32)
    if one_hook:
        sys.addaudithook(_forwarding_hook)
    best = (0.0, -1, 0.0, 0)
    with tempfile.TemporaryDirectory(prefix="h13-s153-") as root:
        _write_shards(root, rng, centers)
        record = w1 = w2 = None
        for step in range(steps):
            if step % STEPS_PER_TRIAL == 0:
                if record is not None:                                  # close the previous trial
                    h = np.maximum(val_x @ w1, 0.0)
                    z = h @ w2
                    z -= z.max(1, keepdims=True)
                    p = np.exp(z)
                    record.val_probs = p / p.sum(1, keepdims=True)
                    acc = float((record.val_probs.argmax(1) == val_y).mean())
                    best = max(best, (acc, record.trial, record.lr, len(record.opened)))
                    record.active = False
                    _current[0] = None
                trial = step // STEPS_PER_TRIAL
                record = TrialRecord(trial, float(10 ** rng.uniform(-2.5, -0.5)))
                if one_hook:
                    _current[0] = record
                else:
                    _per_trial_hook(record)
                w1 = (rng.normal(size=(FEATURES, HIDDEN)) * 0.1).astype(np.float32)
                w2 = np.zeros((HIDDEN, CLASSES), np.float32)
            s = rng.integers(0, SHARDS)
            x = np.load(os.path.join(root, "shard-%02d-x.npy" % s))
            y = np.load(os.path.join(root, "shard-%02d-y.npy" % s))
            h = np.maximum(x @ w1, 0.0)
            z = h @ w2
            z -= z.max(1, keepdims=True)
            p = np.exp(z)
            p /= p.sum(1, keepdims=True)
            p[np.arange(ROWS), y] -= 1.0
            gh = (p @ w2.T) * (h > 0)
            w2 -= record.lr * (h.T @ p) / ROWS
            w1 -= record.lr * (x.T @ gh) / ROWS
            monitor.sample(step)
        _current[0] = None
    return best


def leaky(monitor, steps):
    _train(monitor, steps, one_hook=False)


def fixed(monitor, steps):
    _train(monitor, steps, one_hook=True)
