"""A data-quality helper called from an eager ``GradientTape`` step walks up the stack to the caller (pandas' ``find_stack_level`` style) and, to report "where" each saturated batch was seen, keeps the caller's frame object in its ``origins`` dict; a frame keeps every local of the finished train step alive (the batch, activations, logits, gradients and the tape), so each flagged step's tensors stay for the rest of the run (eager TensorFlow).

Source: pandas-dev/pandas#54628 "BUG: memory leak in
``find_stack_level``" (the helper took ``inspect.currentframe()`` and
walked ``f_back`` without deleting the frame reference; the issue
quotes the ``inspect`` docs: "Keeping references to frame objects ...
can cause your program to create reference cycles ... the lifespan of
all objects which can be accessed from the objects which form the cycle
can become much longer"), fixed in PR #54636 with ``try: ... finally:
del frame``; the same fix in stb-tester/stb-tester PR #587, holoviz/panel
PR #6280 and polars. Fix used here: the helper keeps only the caller's
file name, line and function name (strings), and drops the frame in a
``finally``.
Summary: an eager loop trains a sensor classifier; a batch whose inputs
are saturated (about one in nine) is reported through
``DataWarnings.report``, which remembers each report's origin.

Here: batches of 64 x 96 float32 readings, a 96-192-8 model with
variables trained eagerly with SGD, 14,000 steps; the step function's
locals hold ~170 KiB of tensors. The fixed twin keeps strings only.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21; a do-nothing ``monitor.sample``): leaky
596.8 / 647.7 / 703.9 / 755.5 / 811.3 MiB RSS at 20 / 40 / 60 / 80 % /
end (~19.5 KiB a step, ~170 KiB a reported batch) with gc objects
317,414 / 321,250 / 325,362 / 329,276 / 333,247 (about twelve a report:
the frame, the tape, the tensors it holds), 12.2 s for 14,000 steps;
fixed 543.8 / 546.3 / 546.5 / 546.5 / 546.5 MiB with objects flat
(313,376 -> 313,380), 11.0 s.
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/pandas-dev/pandas/issues/54628"
SLICE = "holdout13"
STEPS = 14000
BATCH = 64
FEATURES = 96
HIDDEN = 192
CLASSES = 8
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["frame", "EagerTensor", "Tensor", "GradientTape"],
              "holder_any": ["origins", "DataWarnings"]},
    "fixed": {"verdict_not": "leak"},
}


class DataWarnings:
    def __init__(self, keep_frames):
        self.keep_frames = keep_frames
        self.origins = {}
        self.count = 0

    def report(self, message):
        frame = sys._getframe(1)                    # the caller, like find_stack_level's walk
        try:
            self.count += 1
            key = (message, self.count)
            if self.keep_frames:
                self.origins[key] = frame           # the leak: the frame keeps the step's locals
            else:
                code = frame.f_code                 # the fix: strings only ...
                self.origins = {key: (code.co_filename, frame.f_lineno, code.co_name)}
        finally:
            del frame                               # ... and no frame reference left behind


def _train(monitor, steps, keep_frames):
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    w1 = tf.Variable(rng.normal(size=(FEATURES, HIDDEN)).astype(np.float32) * 0.1)
    w2 = tf.Variable(tf.zeros([HIDDEN, CLASSES]))
    params = [w1, w2]
    warnings_ = DataWarnings(keep_frames)

    def train_step(x, y, step):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(x, w1))
            logits = tf.matmul(h, w2)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        grads = tape.gradient(loss, params)
        for v, g in zip(params, grads):
            v.assign_sub(0.05 * g)
        saturated = float(tf.reduce_mean(tf.cast(tf.abs(x) >= 3.0, tf.float32)))
        if saturated > 0.0366:
            warnings_.report("batch %d: %.1f%% of readings saturated" % (step, 100 * saturated))
        return loss

    for step in range(steps):
        y = rng.integers(0, CLASSES, BATCH)
        xb = centers[y] + rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
        train_step(tf.constant(np.clip(xb, -3.0, 3.0)), tf.constant(y), step)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, keep_frames=True)


def fixed(monitor, steps):
    _train(monitor, steps, keep_frames=False)
