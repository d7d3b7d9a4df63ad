"""``gc.set_debug(gc.DEBUG_SAVEALL)``, switched on while hunting a leak, stays on in the training script, so every reference cycle the collector finds (here each step's context object with its batch tensors) is moved to ``gc.garbage`` instead of freed (eager loop with a ``tf.function`` step).

Source: yt-dlp/yt-dlp#1949 "Memory leaks" (the reporter measured growth
with the collector's debug flags on; the maintainer: "When setting
``DEBUG_SAVEALL``, ``gc.garbage`` shows all objects that were garbage
collected - ever. This is why it keeps increasing. I don't see any
increase in memory usage" without it). The ``gc`` docs:
``DEBUG_SAVEALL`` - "When set, all unreachable objects found will be
appended to *garbage* rather than being freed. This can be useful for
debugging a leaking program." Fix: switch the flag off again
(``gc.set_debug(0)``) once the inspection is done, and empty
``gc.garbage``.
Summary: to find a leak a user added the recipe ``gc.set_debug(
gc.DEBUG_SAVEALL)`` at the top of the training script, printed
``len(gc.garbage)`` once, and forgot the line. The trainer creates a
``StepContext`` per step holding the batch, the logits and an ``on_done``
closure that logs through the context itself, a small cycle that the
collector would normally free within a few steps. With the flag on every
collected cycle, with the batch and logits tensors it reaches, is
appended to ``gc.garbage`` for the rest of the run.

Here: batches of 16 x 64 float32 features, a 64-128-10 Keras MLP with a
``tf.function`` train step (~2 ms). The fixed twin has the debug line
removed (the collector's default behaviour).

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky +66.0
MiB RSS from 20 % of the run to the end (~8.5 KiB a step; +9.1 gc-tracked
objects a step, all in ``gc.garbage``: 341,547 / 360,211 / 414,436 objects
at 20 % / 40 % / end), fixed +1.8 MiB from 20 % to 40 % and +0.7 MiB
after, objects flat; ~1.1-1.3 ms a step (11-13 s for 10,000 steps).
"""
import gc
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/yt-dlp/yt-dlp/issues/1949"
SLICE = "holdout8"
STEPS = 10000
BATCH = 16
FEATURES = 64
CLASSES = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["StepContext", "EagerTensor", "Tensor", "ndarray", "dict", "cell",
                                                 "function"],
              "holder_any": ["garbage"]},
    "fixed": {"verdict_not": "leak"},
}


class StepContext:
    def __init__(self, step, x, y):
        self.step, self.x, self.y = step, x, y
        self.logits = None
        self.on_done = lambda: self.summary()          # closes over self: a small reference cycle

    def summary(self):
        return {"step": self.step, "acc": float(tf.reduce_mean(tf.cast(
            tf.equal(tf.argmax(self.logits, 1, output_type=tf.int32), self.y), tf.float32)))}


def _train(monitor, steps, save_all):
    if save_all:
        gc.set_debug(gc.DEBUG_SAVEALL)                 # the leak: left on after debugging
    try:
        keras.utils.set_random_seed(0)
        rng = np.random.default_rng(0)
        centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
        model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                                  keras.layers.Dense(CLASSES)])
        optimizer = keras.optimizers.Adam(1e-3)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = loss_fn(y, logits)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return logits

        last = None
        for step in range(steps):
            yb = rng.integers(0, CLASSES, BATCH).astype(np.int32)
            xb = (centers[yb] + rng.normal(size=(BATCH, FEATURES))).astype(np.float32)
            ctx = StepContext(step, tf.constant(xb), tf.constant(yb))
            ctx.logits = train_step(ctx.x, ctx.y)
            if step % 50 == 0:
                last = ctx.on_done()
            monitor.sample(step)
        return last
    finally:
        if save_all:
            gc.set_debug(0)


def leaky(monitor, steps):
    _train(monitor, steps, save_all=True)


def fixed(monitor, steps):
    _train(monitor, steps, save_all=False)
