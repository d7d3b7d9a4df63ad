"""Keeping small numpy slices (views) of large per-batch arrays (no TensorFlow).

Source: Itamar Turner-Trauring, "NumPy views: saving memory, leaking memory, and
subtle bugs" (https://pythonspeed.com/articles/numpy-memory-views/).
Summary: slicing a numpy array returns a view that keeps the whole base array
alive; code that keeps "just the first few values" of each large array actually
retains every full array. The fix from the article: copy the part you keep, so
the large array can be freed (here into a preallocated results array).
"""
import numpy as np

SOURCE = "https://pythonspeed.com/articles/numpy-memory-views/"
SLICE = "holdout"
STEPS = 2000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy"]},
    "fixed": {"verdict_not": "leak"},
}


def _load_batch(rng):
    """A decoded batch: 64 x 128 float32 = 32 KiB."""
    return rng.standard_normal((64, 128), dtype=np.float32)


def leaky(monitor, steps):
    rng = np.random.default_rng(0)
    headers = []
    for step in range(steps):
        batch = _load_batch(rng)
        batch -= batch.mean(axis=0)
        headers.append(batch[0, :8])              # an 8-value view of the 32 KiB array
        monitor.sample(step)


def fixed(monitor, steps):
    rng = np.random.default_rng(0)
    headers = np.empty((steps, 8), dtype=np.float32)
    for step in range(steps):
        batch = _load_batch(rng)
        batch -= batch.mean(axis=0)
        headers[step] = batch[0, :8]              # copied out; the batch is freed
        monitor.sample(step)
