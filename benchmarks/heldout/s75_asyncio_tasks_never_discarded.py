"""Fire-and-forget metric uploads are kept in a ``background_tasks`` set that nothing ever removes them from; each finished task keeps its result, the step's summary tensors (``tf.function`` step + asyncio).

Source: letta-ai/letta#2823 "feat: hold reference to asyncio tasks in
memory" (following the asyncio docs, tasks are added to a module-level
``_background_tasks`` set to keep them alive; the review adds
``task.add_done_callback(_background_tasks.discard)`` with the comment
"Remove task from set when done to prevent memory leaks"). Fix from the
PR: ``add_done_callback(set.discard)``.
Summary: an async training driver uploads each step's summaries (loss,
per-layer norms and a 64-bin logits histogram, all eager tensors) in a
background task and, per the docs, keeps a strong reference to the task in
a set. Without the ``discard`` callback every finished task stays in the
set together with its coroutine result.

Here: a 64-256-10 MLP ``tf.function`` step on batches of 64, one upload
task per step (the upload awaits ``asyncio.sleep(0)`` and returns the
packed summary). The fixed twin's set holds only the task in flight.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky +47 MiB RSS from 20 % of the run to the end (~7.6 KiB and +13
gc-tracked objects per step: the task, its coroutine result dict and the
step's tensors), fixed +0.03 MiB (gc objects flat); ~1.8-2 ms a step
(15-16 s).
"""
import asyncio
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/letta-ai/letta/pull/2823"
SLICE = "holdout6"
STEPS = 8000
BATCH = 64
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Task", "EagerTensor", "Tensor", "dict"],
              "holder_any": ["_background_tasks", "background_tasks"]},
    "fixed": {"verdict_not": "leak"},
}

_background_tasks = set()


async def _upload(summary):
    await asyncio.sleep(0)                      # the HTTP call would go here
    return {"ok": True, "summary": summary}


async def _run(monitor, steps, discard_when_done):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(10)])
    opt = keras.optimizers.SGD(0.05)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        norms = [tf.norm(g) for g in grads]
        hist = tf.histogram_fixed_width(logits, [-10.0, 10.0], nbins=64)
        return loss, norms, hist

    rng = np.random.default_rng(0)
    centers = rng.standard_normal((10, 64)).astype(np.float32)
    for step in range(steps):
        y = rng.integers(0, 10, BATCH)
        x = centers[y] + rng.standard_normal((BATCH, 64)).astype(np.float32)
        loss, norms, hist = train_step(tf.constant(x), tf.constant(y))
        task = asyncio.create_task(_upload({"step": step, "loss": loss, "norms": norms, "hist": hist}))
        _background_tasks.add(task)
        if discard_when_done:
            task.add_done_callback(_background_tasks.discard)
        await asyncio.sleep(0)                  # let the upload run
        monitor.sample(step)


def leaky(monitor, steps):
    asyncio.run(_run(monitor, steps, discard_when_done=False))


def fixed(monitor, steps):
    asyncio.run(_run(monitor, steps, discard_when_done=True))
