"""A DANN train step with a ``tf.custom_gradient`` reversal layer, re-traced each epoch: every trace stays registered.

Source: tensorflow/tensorflow#97697 (TF 2.19) "Memory leak in
``@custom_gradient``" (in graph mode the decorator registers the gradient
function in the global gradient registry, and that closure captures the
forward result, so every traced graph that uses the custom gradient stays
alive forever; reproduced with a ``tf.function`` defined inside a function
that is called repeatedly), with tensorflow/tensorflow#107094 (a proposed fix
in TensorFlow) and keras-team/tf-keras#898 (the same registry pinning dead
training graphs). Until TensorFlow changes, the user-side fix is to trace
the step once: keep one ``tf.function`` and pass the changing value as a
tensor (a ``tf.Variable``) instead of baking it into a new function.
Summary: domain-adversarial training ramps the gradient-reversal strength
``lambda`` every epoch; the script builds ``make_train_step(lam)`` at the
start of each epoch, a closure with the Python float baked in. Without the
custom gradient the old ``tf.function`` would simply be freed; with it each
epoch's graph stays in ``ops._gradient_registry``.

Here: a 32-64 feature extractor with a 10-way label head and a domain head
behind the reversal layer, batches of 128, 20 steps an epoch. The leak comes
in one jump per epoch (a trace).

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +30.7 MiB RSS from 20 % of the run to the end (~390 KiB
per epoch, ~20 KiB per step on average), fixed +0.2 MiB; ~1.6 ms a step plus
~110 ms a trace.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/tensorflow/tensorflow/issues/97697"
SLICE = "holdout4"
STEPS = 2000
STEPS_PER_EPOCH = 20
EXPECT = {
    # No Python object of the user's grows: graphs pinned by TensorFlow's gradient registry.
    "leaky": {"verdict": "leak", "culprit_any": ["FuncGraph", "Graph", "ConcreteFunction", "trace", "retrac", "native"],
              "holder_any": ["_gradient_registry", "registry", "CustomGradient"]},
    "fixed": {"verdict_not": "leak"},
}


class DANN(tf.Module):
    def __init__(self):
        super().__init__()
        init = tf.random.stateless_normal
        self.w_feat = tf.Variable(init((32, 64), seed=(0, 1), stddev=0.1))
        self.w_label = tf.Variable(init((64, 10), seed=(0, 2), stddev=0.1))
        self.w_domain = tf.Variable(init((64, 1), seed=(0, 3), stddev=0.1))

    @property
    def weights(self):
        return [self.w_feat, self.w_label, self.w_domain]


def _losses(model, reverse, x, y, d):
    feat = tf.nn.relu(tf.matmul(x, model.w_feat))
    label_logits = tf.matmul(feat, model.w_label)
    domain_logits = tf.matmul(reverse(feat), model.w_domain)
    label_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=label_logits))
    domain_loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=d, logits=domain_logits))
    return label_loss + domain_loss


def make_train_step(model, lam):
    """As in the report: a new traced step per value of ``lam``, the float baked into the closure."""

    @tf.custom_gradient
    def reverse_gradient(x):
        def grad(dy):
            return -lam * dy
        return tf.identity(x), grad

    @tf.function
    def train_step(x, y, d):
        with tf.GradientTape() as tape:
            loss = _losses(model, reverse_gradient, x, y, d)
        grads = tape.gradient(loss, model.weights)
        for v, g in zip(model.weights, grads):
            v.assign_sub(0.05 * g)
        return loss

    return train_step


@tf.custom_gradient
def reverse_gradient_t(x, lam):
    def grad(dy):
        return -lam * dy, None
    return tf.identity(x), grad


def make_train_step_once(model, lam_var):
    """The fix: one traced step; ``lambda`` is a variable assigned every epoch."""

    @tf.function
    def train_step(x, y, d):
        with tf.GradientTape() as tape:
            loss = _losses(model, lambda f: reverse_gradient_t(f, lam_var), x, y, d)
        grads = tape.gradient(loss, model.weights)
        for v, g in zip(model.weights, grads):
            v.assign_sub(0.05 * g)
        return loss

    return train_step


def _batches(steps):
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((10, 32)).astype(np.float32)
    for _ in range(steps):
        y = rng.integers(0, 10, size=128)
        d = rng.integers(0, 2, size=(128, 1)).astype(np.float32)
        x = centers[y] + rng.standard_normal((128, 32), dtype=np.float32) + d
        yield tf.constant(x), tf.constant(y), tf.constant(d)


def _lambda_schedule(epoch, epochs):
    p = epoch / max(1, epochs)
    return float(2.0 / (1.0 + np.exp(-10.0 * p)) - 1.0)


def leaky(monitor, steps):
    model = DANN()
    epochs = max(1, steps // STEPS_PER_EPOCH)
    train_step = None
    for step, (x, y, d) in enumerate(_batches(steps)):
        if step % STEPS_PER_EPOCH == 0:
            train_step = make_train_step(model, _lambda_schedule(step // STEPS_PER_EPOCH, epochs))
        train_step(x, y, d)
        monitor.sample(step)


def fixed(monitor, steps):
    model = DANN()
    epochs = max(1, steps // STEPS_PER_EPOCH)
    lam = tf.Variable(0.0)
    train_step = make_train_step_once(model, lam)
    for step, (x, y, d) in enumerate(_batches(steps)):
        if step % STEPS_PER_EPOCH == 0:
            lam.assign(_lambda_schedule(step // STEPS_PER_EPOCH, epochs))
        train_step(x, y, d)
        monitor.sample(step)
