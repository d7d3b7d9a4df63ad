"""In an interactive-segmentation training loop, the labels editor records an undo entry (painted indices, old and new values) for every corrective brush stroke and never trims its history, because the history is only reset when the viewed dimensions change (eager loop with a ``tf.function`` step).

Source: napari/napari#533 "add undo/redo to labels layer" (the PR: "the
undo/redo stack is reset whenever you change the viewed dimensions"; the
review: "do we want to impose some limit on the number of undos that are
allowed? maybe 20? I worry that otherwise we might end up filling up too
much memory", and "My main suggestion is to switch from lists to
deques"). Fix, the review's: a bounded history, ``deque(maxlen=20)``.
Summary: a small segmentation network is refined with simulated
click-and-paint corrections. Each step the model predicts masks for four
slices of one volume; a simulated annotator paints two corrective strokes
per slice on the volume's ``LabelsLayer``, whose ``paint`` saves
``(indices, old_values, new_value)`` in ``_undo_history`` as an editor
does; the corrected slices are the targets of the next train step. The
editor stays on the same 3-D volume for the whole session (the viewed
dimensions never change), so the history is never reset and keeps every
stroke: about 1.4 KiB of index and value arrays per stroke.

Here: a 24-slice, 96 x 96 ``int32`` volume, a three-layer convolutional
net (16 channels) run on four slices a step with a ``tf.function`` train
step (~15-25 ms a step), eight strokes (brush radius 4) a step. The fixed
twin keeps ``deque(maxlen=20)`` (full after 3 steps).

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky +15.5
MiB RSS from 20 % of the run to the end (~16.5 KiB a step, ~2 KiB a
stroke; 576.0 / 580.1 / 591.5 MiB at 20 % / 40 % / end) with gc objects
nearly flat (327,767 / 329,616 / 329,088: the entries are tuples of arrays,
which the collector stops tracking), fixed 574.7 / 577.3 / 577.6 MiB with
objects 326,957 / 326,608 / 326,608; ~20 ms a step (22-26 s for 1,200
steps, with another job on the machine).
"""
import os
from collections import deque

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/napari/napari/pull/533"
SLICE = "holdout9"
STEPS = 1200
SLICES = 24
SIZE = 96
PER_STEP = 4
STROKES = 2
RADIUS = 4
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "tuple", "list"],
              "holder_any": ["_undo_history", "LabelsLayer", "undo"]},
    "fixed": {"verdict_not": "leak"},
}

_DY, _DX = np.mgrid[-RADIUS:RADIUS + 1, -RADIUS:RADIUS + 1]
_DISK = _DY * _DY + _DX * _DX <= RADIUS * RADIUS
_DISK_DY, _DISK_DX = _DY[_DISK], _DX[_DISK]


class LabelsLayer:
    def __init__(self, data, bounded_history):
        self.data = data
        self._undo_history = deque(maxlen=20) if bounded_history else []     # the fix: maxlen=20
        self._redo_history = []

    def paint(self, z, y, x, label):
        ys = np.clip(y + _DISK_DY, 0, SIZE - 1)
        xs = np.clip(x + _DISK_DX, 0, SIZE - 1)
        indices = (np.full(len(ys), z), ys, xs)
        old_values = self.data[indices].copy()
        self.data[indices] = label
        self._undo_history.append((indices, old_values, label))
        self._redo_history = []

    def undo(self):
        indices, old_values, _ = self._undo_history.pop()
        self.data[indices] = old_values


def _volume(rng):
    zz, yy, xx = np.mgrid[0:SLICES, 0:SIZE, 0:SIZE]
    cy = SIZE / 2 + 20 * np.sin(zz / 4.0)
    cx = SIZE / 2 + 20 * np.cos(zz / 5.0)
    truth = (((yy - cy) ** 2 + (xx - cx) ** 2) < (18 + 6 * np.sin(zz / 3.0)) ** 2).astype(np.int32)
    image = (truth * 1.0 + rng.normal(scale=0.6, size=truth.shape)).astype(np.float32)
    return image, truth


def _train(monitor, steps, bounded_history):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    image, truth = _volume(rng)
    layer = LabelsLayer(np.zeros_like(truth), bounded_history)
    model = keras.Sequential([keras.Input((SIZE, SIZE, 1)),
                              keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
                              keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
                              keras.layers.Conv2D(1, 1)])
    optimizer = keras.optimizers.Adam(1e-3)

    @tf.function
    def predict(x):
        return model(x, training=False)[..., 0]

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)[..., 0]
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for step in range(steps):
        zs = (step * PER_STEP + np.arange(PER_STEP)) % SLICES
        x = image[zs][..., None]
        pred = predict(x).numpy() > 0
        for k, z in enumerate(zs):
            wrong = np.argwhere(pred[k] != truth[z].astype(bool))
            if len(wrong) == 0:
                wrong = np.argwhere(np.ones((SIZE, SIZE), bool))
            for y_, x_ in wrong[rng.integers(0, len(wrong), STROKES)]:
                layer.paint(z, int(y_), int(x_), int(truth[z, y_, x_]))       # the annotator's correction
        train_step(x, layer.data[zs].astype(np.float32))
        monitor.sample(step)
    return len(layer._undo_history)


def leaky(monitor, steps):
    _train(monitor, steps, bounded_history=False)


def fixed(monitor, steps):
    _train(monitor, steps, bounded_history=True)
