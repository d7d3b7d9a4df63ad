"""A ``unittest.mock`` spy wrapped around the augmentation function to check that strong augmentation is used stays on for the rest of training, and the mock records every call's image batch (eager loop; late onset).

Source: python/cpython#106823 "Python unittest.mock objects leak new
objects when calling sys.getsizeof calls on them" ("this loop will leak
indefinitely"; maintainer: "``Literal.mock_calls`` shows what's going
on": the mock records every call it receives, with its arguments, and
"AFAIK this cannot be turned off"; the reporter: "if literal is created
within the loop then there is no leak"). Fix: do not keep a recording
mock alive in a long run; here the sanity check reads ``call_count`` and
then calls ``reset_mock()``, which drops the recorded calls.
Summary: at 30 % of the run a curriculum switches to strong augmentation.
To make sure the new path is really exercised, the script wraps it in
``mock.Mock(wraps=strong_augment)`` and asserts ``call_count`` grew at the
end of each epoch, a check borrowed from a unit test. The spy forwards
every call but also appends it to ``call_args_list`` and ``mock_calls``,
each entry holding the batch's image tensor and labels, for the rest of
the run.

Here: batches of 16 RGB 10 x 10 images (19 KiB of float32 a batch), a
300-256-10 Keras MLP trained by a ``tf.function`` step after the eager
augmentation, 100 steps an epoch. The fixed twin resets the spy after
each epoch's check, so it holds at most one epoch of calls.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky flat
before the switch, then +71.9 MiB RSS from 20 % of the run to the end (~34
KiB per step after the onset, +6.2 gc-tracked objects a step: ``_Call``,
``EagerTensor``, ``TensorShape``), fixed +3.4 MiB from 20 % to 40 % (the
switch and its first epoch of recorded calls) and +0.2 MiB from 40 % to
the end (gc objects flat); ~3.5-3.8 ms a step (11 s; ~39 s under the
runner).
"""
import os
from unittest import mock

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/python/cpython/issues/106823"
SLICE = "holdout7"
STEPS = 3000
STRONG_FROM = 0.3          # fraction of the run before the curriculum switches to strong augmentation
STEPS_PER_EPOCH = 100
BATCH = 16
SIZE = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "_Call", "call"],
              "holder_any": ["call_args_list", "mock_calls", "augment_spy", "_mock"]},
    "fixed": {"verdict_not": "leak"},
}


def light_augment(images, labels):
    return tf.image.flip_left_right(images), labels


def strong_augment(images, labels):
    images = tf.image.flip_left_right(images)
    images = tf.image.adjust_brightness(images, 0.1)
    return tf.clip_by_value(images * 1.2 - 0.1, 0.0, 1.0), labels


def _train(monitor, steps, reset_after_check):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    protos = rng.random((10, SIZE, SIZE, 3)).astype(np.float32)
    model = keras.Sequential([keras.Input((SIZE, SIZE, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
    opt = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(images, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    strong_from = int(steps * STRONG_FROM)
    augment = light_augment
    augment_spy = None
    checked = 0
    for step in range(steps):
        if step == strong_from:
            augment_spy = mock.Mock(wraps=strong_augment)      # to assert the new path is used
            augment = augment_spy
        y = rng.integers(0, 10, BATCH)
        x = np.clip(protos[y] + 0.2 * rng.standard_normal((BATCH, SIZE, SIZE, 3)), 0, 1).astype(np.float32)
        images, labels = augment(tf.constant(x), tf.constant(y))     # eager augmentation
        train_step(images, labels)
        if augment_spy is not None and step % STEPS_PER_EPOCH == STEPS_PER_EPOCH - 1:
            assert augment_spy.call_count > checked, "strong augmentation was not used"
            checked = augment_spy.call_count
            if reset_after_check:                              # the fix: drop the recorded calls
                augment_spy.reset_mock()
                checked = 0
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, reset_after_check=False)


def fixed(monitor, steps):
    _train(monitor, steps, reset_after_check=True)
