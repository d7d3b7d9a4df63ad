"""A validation helper raises one module-level exception instance for every rejected sample; each raise chains a new traceback onto it, keeping every rejected sample's frame and arrays alive (no TensorFlow).

Source: "The Traceback That Ate Memory" (blog.mentholych.xyz, 2024): a
filter raised a module-level ``ParseBookException = Exception("parse book
failed!")`` for rejected items and the caught exceptions were dropped, yet
the 2,000-item script used 9 GB, and tracemalloc put 9.5 GiB on the line
that created the items. Raising the same instance again prepends the new
frames to its existing ``__traceback__``, and each traceback entry keeps
its frame, with the locals of the call that raised (the rejected item),
alive for as long as the module-level instance lives. Fix: create the
exception when raising it (``raise InvalidSample(...)``), so each
traceback dies with its exception.
Summary: a data-cleaning step validates each decoded sample and, to avoid
"allocating an exception per bad sample", raises the module-level
``INVALID_SAMPLE``; the loop catches it and skips the sample. About one
sample in eight is rejected, so the traceback chain on ``INVALID_SAMPLE``
grows by two entries and one frame (with its decoded sample) for each
rejection, for the whole run.

Here: batches of 16 samples of 64 float64 values (512 B each), a 64-32-1
numpy MLP on the accepted ones (three passes a batch). The fixed twin
raises a fresh ``InvalidSample`` each time.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky +73.4 MiB RSS
from 20 % of the run to the end (~3.2 KiB per step, +5.6 gc-tracked
objects a step: ``traceback`` and ``frame``, steady; ~1.9 rejections a
step), fixed +0.25 MiB (gc objects flat); ~0.35 ms a step (10-12 s; ~15 s
under the runner).
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://blog.mentholych.xyz/posts/2024-04-14-traceback-the-memory-eater"
SLICE = "holdout7"
STEPS = 30000
BATCH = 16
FEATURES = 64
HIDDEN = 32
INNER = 3              # SGD passes over each batch
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["traceback", "frame", "ndarray", "numpy"],
              "holder_any": ["INVALID_SAMPLE", "__traceback__", "tb_next"]},
    "fixed": {"verdict_not": "leak"},
}


class InvalidSample(ValueError):
    pass


INVALID_SAMPLE = InvalidSample("sample failed validation")     # built once, "to save allocations"


def validate(sample, reuse_instance):
    decoded = np.clip(sample, -4.0, 4.0)
    if np.abs(sample).max() > 3.1:                  # ~1 sample in 8 is an outlier row
        if reuse_instance:
            raise INVALID_SAMPLE                     # chains this frame onto its __traceback__
        raise InvalidSample("sample failed validation")
    return decoded


def _train(monitor, steps, reuse_instance):
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(FEATURES)
    w1 = rng.standard_normal((FEATURES, HIDDEN)) * 0.1
    w2 = np.zeros(HIDDEN)
    rejected = 0
    for step in range(steps):
        raw = [rng.standard_normal(FEATURES) for _ in range(BATCH)]   # decoded one by one
        rows = []
        for sample in raw:
            try:
                rows.append(validate(sample, reuse_instance))
            except InvalidSample:
                rejected += 1
        if rows:
            x = np.stack(rows)
            y = (x @ w_true > 0).astype(np.float64)
            for _ in range(INNER):
                h = np.tanh(x @ w1)
                p = 1.0 / (1.0 + np.exp(-(h @ w2)))
                g = (p - y) / len(y)
                w2 -= 0.5 * h.T @ g
                w1 -= 0.5 * x.T @ (np.outer(g, w2) * (1 - h * h))
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, reuse_instance=True)


def fixed(monitor, steps):
    _train(monitor, steps, reuse_instance=False)
