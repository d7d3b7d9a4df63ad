"""Dashboard updates queued as ``functools.partial`` callbacks that nothing drains (no TensorFlow).

Source: bokeh/bokeh#7992 "memory leak on add_next_tick_callback": a worker thread
hands each new result to the document with
``doc.add_next_tick_callback(partial(locked_update, res))``; the queued partials
hold the result arrays, and memory drains continuously when callbacks pile up
faster than they are consumed.
Summary: the training loop schedules a live-plot update per step as a
``partial`` bound to a snapshot of the weights; with no client connected the
queue is never drained and every snapshot stays referenced. Fix: keep only the
latest pending update (a ``deque(maxlen=1)``): a plot only needs the newest state.

Here: a numpy MLP step on a 512 x 256 batch; a 256 x 16 float32 snapshot of the
first layer (16 KiB) per step.

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +22.2 MiB RSS from 20 % of the run to the end, fixed +0.0 MiB;
~6-8 ms a step.
"""
import collections
import functools

import numpy as np

SOURCE = "https://github.com/bokeh/bokeh/issues/7992"
SLICE = "holdout2"
STEPS = 1500
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["partial", "ndarray", "numpy", "deque"]},
    "fixed": {"verdict_not": "leak"},
}


class Dashboard:
    """Stands in for a plotting server session; the queue is drained only when a client is attached."""

    def __init__(self, pending):
        self.pending = pending
        self.client_attached = False
        self.points = 0

    def add_next_tick_callback(self, cb):
        self.pending.append(cb)

    def tick(self):
        if not self.client_attached:
            return
        while self.pending:
            self.pending.popleft()()


def _update_plot(dash, step, weights):
    dash.points += 1


def _loop(monitor, steps, pending):
    dash = Dashboard(pending)
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((256, 16)) * 0.05).astype(np.float32)
    w2 = (rng.standard_normal((16, 1)) * 0.05).astype(np.float32)
    true_w = rng.standard_normal((256, 1)).astype(np.float32)
    for step in range(steps):
        x = rng.standard_normal((512, 256), dtype=np.float32)
        y = np.tanh(x @ true_w)
        h = np.maximum(x @ w1, 0.0)
        err = (h @ w2 - y) / len(x)
        g2 = h.T @ err
        g1 = x.T @ ((err @ w2.T) * (h > 0))
        w1 -= 0.05 * g1
        w2 -= 0.05 * g2
        dash.add_next_tick_callback(functools.partial(_update_plot, dash, step, w1.copy()))
        dash.tick()
        monitor.sample(step)


def leaky(monitor, steps):
    _loop(monitor, steps, collections.deque())


def fixed(monitor, steps):
    _loop(monitor, steps, collections.deque(maxlen=1))
