"""A gradient-accumulation loop with dynamic loss scaling keeps each accumulation window's half-precision gradient bucket until the optimizer step frees it; when the scaled gradients overflow, the step is skipped and the loss scale halved, but the early return also skips the freeing, so every overflow leaves a bucket behind. The scale grows back and overflows again every ~200 steps, so memory steps up in bursts (``tf.function`` gradients + eager accumulation).

Source: EleutherAI/DeeperSpeed#66 "Resolve gradient accumulation memory
leak" ("With gradient overflow (due to large batch size), DS skips the
current iteration (no optimizer step) and updates the loss scale. This
is happening with grad_accum>4, and the skip prevents some reduction
buffers from being freed correctly. They persist throughout training.
Fix: Explicitly free IPG buffers when an overflow is detected."). Fix,
as in the PR: free the window's bucket on the overflow path too.
Summary: an MLP is trained with 4 micro-batches per optimizer step. Each
micro-batch's gradients of the scaled loss are cast to float16 (the
"reduction bucket") and kept in ``GradAccumulator._buckets[window]``. At
the window boundary the accumulator checks the bucket for inf/nan: if
finite it unscales, applies and ``del``s the bucket; on overflow it halves
the scale and returns. The scale doubles after 50 clean windows, so it
keeps climbing back into overflow: one leaked bucket (4 x 136 k halves,
~1.1 MiB) roughly every 55 windows (~220 micro-batches).

Here: 256 input features, a 256-512-10 MLP, micro-batches of 32 with
30 % label noise (so the gradients stay large enough to overflow), SGD
with momentum, initial loss scale 2**12 (first overflow after ~300
windows). The fixed twin frees the
bucket in a ``finally``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21
/ Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky
563.1 / 575.5 / 611.3 MiB RSS at 20 % / 40 % / end (the first overflow
comes after ~1,200 micro-batches, then ~1.1 MiB every ~220) with gc
objects 317,190 / 317,421 / 318,114; fixed 556.6 / 558.5 / 558.9 MiB,
objects flat (317,064); ~1.8 ms a micro-batch (21.4 s leaky, 22.8 s
fixed for 12,000).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/EleutherAI/DeeperSpeed/pull/66"
SLICE = "holdout11"
STEPS = 12000          # micro-batches
ACCUM = 4
GROWTH_INTERVAL = 50
BATCH = 32
FEATURES = 256
HIDDEN = 512
CLASSES = 10
LABEL_NOISE = 0.3
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "GradAccumulator", "list"],
              "holder_any": ["_buckets", "GradAccumulator", "accum"]},
    "fixed": {"verdict_not": "leak"},
}


class GradAccumulator:
    def __init__(self, variables, optimizer, free_on_overflow):
        self.variables, self.optimizer = variables, optimizer
        self.free_on_overflow = free_on_overflow
        self.scale = 2.0 ** 12
        self.good_windows = 0
        self.overflows = 0
        self.window = 0
        self._buckets = {}

    def add(self, grads):
        self._buckets.setdefault(self.window, []).append([tf.cast(g, tf.float16) for g in grads])

    def step(self):
        window, self.window = self.window, self.window + 1
        bucket = self._buckets[window]
        try:
            finite = all(bool(tf.reduce_all(tf.math.is_finite(g))) for micro in bucket for g in micro)
            if not finite:
                self.overflows += 1
                self.scale /= 2.0
                self.good_windows = 0
                return False                                   # the leak: skips the ``del`` below
            summed = [tf.add_n([tf.cast(micro[i], tf.float32) for micro in bucket]) / (self.scale * ACCUM)
                      for i in range(len(self.variables))]
            self.optimizer.apply_gradients(zip(summed, self.variables))
            self.good_windows += 1
            if self.good_windows % GROWTH_INTERVAL == 0:
                self.scale *= 2.0
            del self._buckets[window]
            return True
        finally:
            if self.free_on_overflow:
                self._buckets.pop(window, None)                # the fix: free on every path


def _train(monitor, steps, free_on_overflow):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(HIDDEN, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    accum = GradAccumulator(model.trainable_variables, optimizer, free_on_overflow)

    @tf.function
    def scaled_grads(x, y, scale):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True)) * scale
        return tape.gradient(loss, model.trainable_variables)

    for step in range(steps):
        y = rng.integers(0, CLASSES, BATCH)
        x = centers[y] + rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
        noisy = rng.random(BATCH) < LABEL_NOISE
        y = np.where(noisy, rng.integers(0, CLASSES, BATCH), y)
        accum.add(scaled_grads(x, y, tf.constant(accum.scale, tf.float32)))
        if (step + 1) % ACCUM == 0:
            accum.step()
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, free_on_overflow=False)


def fixed(monitor, steps):
    _train(monitor, steps, free_on_overflow=True)
