"""Each staged batch registers a ``weakref.finalize`` callback that is a closure over ``self``, so the finalizer registry keeps every staged batch and its tensors (eager loop).

Source: bluesky/ophyd#865 "Avoid closing over self in the finalizers."
(``weakref.finalize(self, ...)`` with a callback that references ``self``:
the object is only finalized at interpreter shutdown instead of when it goes
out of scope, as the sample code in the thread shows). Fix from the PR: the
finalizer closes over what it needs to release (a name, a handle), not over
``self``.
Summary: a double-buffering helper stages the next batch (a pinned copy of
the inputs and the augmented images) in a ``StagedBatch`` object that
registers a finalizer to return its slot to the staging pool. The
finalizer is a nested function that reads ``self.slot``, so its closure
cell holds ``self``, and ``weakref.finalize``'s registry holds the
function: no staged batch is ever freed.

Here: 8 x 32 x 32 x 3 float32 images (96 KiB) flipped and cropped
eagerly, a small Conv2D model trained eagerly with ``GradientTape``; the
staged augmented batch and its labels (~96 KiB) are kept per step in the
leaky run. The fixed twin's finalizer closes over the slot number only.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky +119 MiB RSS from 20 % of the run to the end of a 1,500-step run
(~102 KiB and +10 gc-tracked objects per step, steady), fixed +0.1 MiB
(gc objects flat); ~36-49 ms a step with another job running, so STEPS was
cut to 1,000.
"""
import os
import weakref

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/bluesky/ophyd/pull/865"
SLICE = "holdout6"
STEPS = 1000
BATCH = 8
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "StagedBatch", "finalize"],
              "holder_any": ["finalize", "_registry", "StagedBatch", "self"]},
    "fixed": {"verdict_not": "leak"},
}

_FREE_SLOTS = []


def _release_slot(slot):
    _FREE_SLOTS.append(slot)
    del _FREE_SLOTS[:-8]


class StagedBatch:
    def __init__(self, slot, images, labels, closure_over_self):
        self.slot = slot
        flipped = tf.image.flip_left_right(images)
        self.images = tf.image.resize_with_crop_or_pad(flipped, 32, 32)
        self.labels = labels
        if closure_over_self:
            def _finalize():
                _release_slot(self.slot)              # the closure cell holds self
            self._finalizer = weakref.finalize(self, _finalize)
        else:
            self._finalizer = weakref.finalize(self, _release_slot, slot)


def _train(monitor, steps, closure_over_self):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((32, 32, 3)),
        keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10),
    ])
    opt = keras.optimizers.SGD(0.05)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    rng = np.random.default_rng(0)
    for step in range(steps):
        labels = tf.constant(rng.integers(0, 10, BATCH))
        images = tf.constant(rng.random((BATCH, 32, 32, 3), dtype=np.float32))
        staged = StagedBatch(step % 8, images, labels, closure_over_self)
        with tf.GradientTape() as tape:
            loss = loss_fn(staged.labels, model(staged.images, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        del staged
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, closure_over_self=True)


def fixed(monitor, steps):
    _train(monitor, steps, closure_over_self=False)
