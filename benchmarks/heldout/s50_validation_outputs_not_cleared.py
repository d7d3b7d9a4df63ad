"""Validation-step outputs collected for the epoch-end hook and never cleared (eager).

Source: ray-project/ray#38039 "[release] fix torch lightning gpu tests"
(porting ``validation_epoch_end(outputs)`` to Lightning 2.0's
``on_validation_epoch_end``, the module keeps ``self.validation_step_outputs``
itself; review: "clear the validation outputs at the end of validation
epoch", ``self.validation_step_outputs.clear()``), after
Lightning-AI/pytorch-lightning#16520 "Remove memory-retaining epoch-end
hooks" moved the collection into user code, and #8453 / #8583 (outputs of
every validation step kept alive). Fix from the review: clear the list in
the epoch-end hook.
Summary: a custom eager training loop validates every 50 steps; each
validation step appends its loss and predictions (tensors) to
``model.validation_step_outputs`` so the epoch-end hook can compute metrics,
but the hook never clears the list, so every validation's outputs stay.

Here: a 256-512-32 MLP trained on batches of 256; each validation runs 20
batches of 256 (32 KiB of predictions each). The leak comes in one jump per
validation; the fixed twin's list fills and empties at every validation.

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +37.6 MiB RSS from 20 % of the run to the end (~1.3 MiB
per validation, growing a little as the epoch-end hook walks every kept
output; ~33 KiB per step on average), fixed +2.8 MiB, a sawtooth of +-2 MiB
around a flat line; ~26 ms a training step, ~0.2 s a validation.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/ray-project/ray/pull/38039"
SLICE = "holdout4"
STEPS = 1500
VAL_EVERY = 50
VAL_BATCHES = 20
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "dict", "list"],
              "holder_any": ["validation_step_outputs"]},
    "fixed": {"verdict_not": "leak"},
}


class Classifier(tf.Module):
    def __init__(self, clear_outputs):
        super().__init__()
        init = tf.random.stateless_normal
        self.w1 = tf.Variable(init((256, 512), seed=(2, 1), stddev=0.05))
        self.w2 = tf.Variable(init((512, 32), seed=(2, 2), stddev=0.05))
        self.clear_outputs = clear_outputs
        self.validation_step_outputs = []
        self.val_history = []

    def __call__(self, x):
        return tf.matmul(tf.nn.relu(tf.matmul(x, self.w1)), self.w2)

    def training_step(self, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=self(x)))
        for v, g in zip([self.w1, self.w2], tape.gradient(loss, [self.w1, self.w2])):
            v.assign_sub(0.05 * g)
        return loss

    def validation_step(self, x, y):
        logits = self(x)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        self.validation_step_outputs.append({"val_loss": loss, "preds": tf.nn.softmax(logits), "y": y})

    def on_validation_epoch_end(self):
        losses = [o["val_loss"] for o in self.validation_step_outputs]
        acc = [tf.reduce_mean(tf.cast(tf.argmax(o["preds"], 1, output_type=tf.int32) == o["y"], tf.float32))
               for o in self.validation_step_outputs]
        self.val_history.append((float(tf.reduce_mean(losses)), float(tf.reduce_mean(acc))))
        if self.clear_outputs:
            self.validation_step_outputs.clear()          # the fix


def _data():
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((32, 256)).astype(np.float32)

    def batch():
        y = rng.integers(0, 32, size=256).astype(np.int32)
        x = centers[y] + 2.0 * rng.standard_normal((256, 256), dtype=np.float32)
        return tf.constant(x), tf.constant(y)

    val = [batch() for _ in range(VAL_BATCHES)]
    return batch, val


def _train(monitor, steps, clear_outputs):
    model = Classifier(clear_outputs)
    batch, val = _data()
    for step in range(steps):
        model.training_step(*batch())
        if step % VAL_EVERY == VAL_EVERY - 1:
            for xv, yv in val:
                model.validation_step(xv, yv)
            model.on_validation_epoch_end()
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, clear_outputs=False)


def fixed(monitor, steps):
    _train(monitor, steps, clear_outputs=True)
