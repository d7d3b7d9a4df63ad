"""A trainer streams its progress through a small bridge that tracks every dispatched side task (a shard evaluation, a checkpoint upload) in two sibling dicts written on adjacent lines, ``pending_task_tiers`` and ``pending_task_collab``; when a task reports back, the bridge pops the task from ``pending_task_tiers`` but never from ``pending_task_collab``, so one task-id string and its flag stay behind per task (``tf.function``; grows every step, small and slow: ~0.6 KiB a step, strings in a dict that the gc does not track).

Source: sonichi/sutando pull request #3432 "fix(progress-stream): a
collaborator's task updates core-status but never streamed" (review):
"``pending_task_collab`` : 2542 declare | 4242 write | 5192 read -> 3
sites, NO pop; ``pending_task_tiers`` : ... 201 pop | 4755 pop | 5232 pop
-> 3 pops ... one ``str -> bool`` entry per task, never reclaimed, for the
lifetime of the bridge process. That is small per task and the bridge is
long-lived, so it is a slow leak ... add ``pending_task_collab.pop(task_id,
None)`` alongside each existing ``pending_task_tiers.pop(...)``". Fix used
here (the review's): the bridge pops both dicts wherever it popped one.
Summary: a 40-96-5 softmax classifier trained with Adam in a
``tf.function`` on batches of 256; each step dispatches four side tasks (evaluations on two held-out
shards, a metrics upload and a weights-digest check, task ids of ~60
characters) to the bridge and the previous step's tasks report back.

Here: 20,000 steps. The fixed bridge pops both sibling dicts.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS
read before each object count, at the marks only): leaky 561.1 / 564.1 /
565.9 / 569.4 / 571.1 MiB RSS at 20 / 40 / 60 / 80 % / end (555.9 MiB at
the first step; ~0.6 KiB a step, in steps as the dict resizes: four
~60-character task ids and their entries in ``pending_task_collab``) with
gc objects 322,750 at the first step, then 322,500 / 322,502 / 322,504 /
322,506 / 322,508 at the same marks (flat: a dict of strings and booleans
is not tracked), 16.9 s for 20,000 steps (~0.84 ms a step); fixed 559.7 /
559.7 / 559.7 / 559.8 / 559.8 MiB with the same object counts, 18.9 s
(~0.95 ms a step). 21-23 s a variant in its process, imports included.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/sonichi/sutando/pull/3432"
SLICE = "holdout19"
STEPS = 20000
BATCH = 256
FEATURES = 40
CLASSES = 5
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["str", "dict", "native"],
              "holder_any": ["pending_task_collab", "ProgressBridge", "bridge"]},
    "fixed": {"verdict_not": "leak"},
}


class ProgressBridge:
    def __init__(self, pop_both):
        self.pop_both = pop_both
        self.pending_task_tiers = {}
        self.pending_task_collab = {}
        self.streamed = 0
        self.status = {"running": 0, "done": 0}

    def dispatch(self, task_id, tier, collaborator):
        self.pending_task_tiers[task_id] = tier
        self.pending_task_collab[task_id] = collaborator
        self.status["running"] += 1

    def report(self, task_id, result):
        tier = self.pending_task_tiers.pop(task_id, None)
        if self.pop_both:                                     # the fix (sutando#3432)
            collab = self.pending_task_collab.pop(task_id, None)
        else:
            collab = self.pending_task_collab.get(task_id)
        if tier is not None and (collab or tier <= 2):
            self.streamed += 1
        self.status["running"] -= 1
        self.status["done"] += 1


def _train(monitor, steps, pop_both):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(96, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    opt = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    bridge = ProgressBridge(pop_both)
    in_flight = []
    for step in range(steps):
        y = rng.integers(0, CLASSES, BATCH)
        x = (centers[y] + rng.standard_normal((BATCH, FEATURES))).astype(np.float32)
        loss = float(train_step(tf.constant(x), tf.constant(y.astype(np.int32))))
        for task_id in in_flight:                             # last step's tasks report back
            bridge.report(task_id, loss)
        in_flight = ["eval:run-0417-lr3e-4:heldout-shard-%02d:step-%07d" % ((2 * step + k) % 16, step)
                     for k in range(2)]
        in_flight.append("upload:run-0417-lr3e-4:metrics-window:step-%07d" % step)
        in_flight.append("verify:run-0417-lr3e-4:ema-weights-digest:step-%07d" % step)
        for task_id in in_flight:
            bridge.dispatch(task_id, tier=1 + step % 3, collaborator=task_id.startswith("upload"))
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, pop_both=False)


def fixed(monitor, steps):
    _train(monitor, steps, pop_both=True)
