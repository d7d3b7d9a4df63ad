"""A step logger whose ``window=[]`` default argument keeps every step's record (no TensorFlow).

Source: getnikola/nikola#1532 "Avoiding memory leaks" (a list or dict as a
default argument value is created once, when the function is defined, and
shared by every call that omits it: "usually this problem generates a memory
leak, because you can have a never-ending array"; fix: default to ``None`` and
create the list in the body), the pattern pylint reports as W0102
(dangerous-default-value).
Summary: a training script's ``log_step(step, loss, weights, window=[])`` is
meant to fill the per-epoch window the caller passes in; the training loop
calls it without one, so every record goes into the single default list,
which lives as long as the function: one weight snapshot per step, forever.
Fix from the thread: ``window=None`` and a list made in the body; the loop
passes a fresh window per epoch, which is dropped when the epoch ends.

Here: a numpy linear model trained with minibatch SGD; each record holds a copy
of the 64 x 8 float64 weights (4 KiB).

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +17.7 MiB RSS from 20 % of the run to the end (~4.5 KiB per step),
fixed +0.6 MiB (one 200-step window at a time); ~0.25 ms a step.
"""
import numpy as np

SOURCE = "https://github.com/getnikola/nikola/pull/1532"
SLICE = "holdout3"
STEPS = 5000
STEPS_PER_EPOCH = 200
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "dict", "list"],
              "holder_any": ["log_step", "window", "defaults"]},
    "fixed": {"verdict_not": "leak"},
}


def log_step(step, loss, weights, window=[]):          # noqa: B006 - the leak
    window.append({"step": step, "loss": loss, "weights": weights.copy()})
    recent = window[-20:]
    return sum(r["loss"] for r in recent) / len(recent)


def log_step_fixed(step, loss, weights, window=None):
    if window is None:
        window = []
    window.append({"step": step, "loss": loss, "weights": weights.copy()})
    recent = window[-20:]
    return sum(r["loss"] for r in recent) / len(recent)


def _batches(rng, n=64):
    true_w = rng.standard_normal((64, 8))
    while True:
        x = rng.standard_normal((n, 64))
        yield x, x @ true_w + 0.1 * rng.standard_normal((n, 8))


def _sgd_step(w, x, y, lr=0.01):
    err = x @ w - y
    w -= lr * (x.T @ err) / len(x)
    return float((err * err).mean())


def leaky(monitor, steps):
    rng = np.random.default_rng(0)
    w = np.zeros((64, 8))
    batches = _batches(rng)
    for step in range(steps):
        x, y = next(batches)
        loss = _sgd_step(w, x, y)
        log_step(step, loss, w)                         # no window passed: the default list
        monitor.sample(step)


def fixed(monitor, steps):
    rng = np.random.default_rng(0)
    w = np.zeros((64, 8))
    batches = _batches(rng)
    window = None
    for step in range(steps):
        if step % STEPS_PER_EPOCH == 0:
            window = []                                 # one window per epoch
        x, y = next(batches)
        loss = _sgd_step(w, x, y)
        log_step_fixed(step, loss, w, window)
        monitor.sample(step)
