"""Annealed temperature and loss weight passed to a ``tf.function`` as Python floats: a new trace per value, after warm-up.

Source: yerkojahve/Meta-Pseudo-label#1 "Performance issue in
snlds/examples/lorenz_attractor_trainer.py" (a copy of google-research's
SNLDS trainer: the Python floats ``learning_rate``, ``temperature`` and
``cross_entropy_coef`` are passed to the ``tf.function``-decorated
``train_step`` inside the training loop, so "every time the value changes, a
new graph will be generated"; suggested fix: "pass them as tf.constant type
values"), the retracing rule in TensorFlow's tf.function guide ("pass
tensors instead of python literals").
Summary: a switching dynamical system with a Gumbel-softmax discrete state
is trained with a temperature that stays at its initial value for a warm-up
phase and is then annealed on a staircase (a new value every 20 steps),
together with a cross-entropy coefficient that ramps in. During warm-up the
step is traced once; afterwards every new value is a new trace that the
``tf.function`` keeps.

Here: a 16-8-16 encoder / discrete-state / decoder on batches of 64, warm-up
for 20 % of the run. The leak starts after the warm-up and grows in one
jump every 20 steps.

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +73.3 MiB RSS from 20 % of the run to the end (all after
the warm-up, ~0.9 MiB per trace, ~48 KiB per step on average), fixed +0.0
MiB; ~2 ms a step plus ~100 ms a trace.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/yerkojahve/Meta-Pseudo-label/issues/1"
SLICE = "holdout4"
STEPS = 2000
WARMUP = 0.2
ANNEAL_EVERY = 20
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["retrac", "trace", "ConcreteFunction", "FuncGraph", "native"],
              "holder_any": ["train_step"]},
    "fixed": {"verdict_not": "leak"},
}


class SwitchingModel(tf.Module):
    def __init__(self):
        super().__init__()
        init = tf.random.stateless_normal
        self.w_enc = tf.Variable(init((16, 8), seed=(1, 1), stddev=0.3))
        self.w_dec = tf.Variable(init((8, 16), seed=(1, 2), stddev=0.3))
        self.w_dyn = tf.Variable(init((8, 8), seed=(1, 3), stddev=0.3))

    @property
    def weights(self):
        return [self.w_enc, self.w_dec, self.w_dyn]


def _step_body(model, x, x_next, noise, temperature, xent_coef, lr):
    with tf.GradientTape() as tape:
        logits = tf.matmul(x, model.w_enc)
        z = tf.nn.softmax((logits + noise) / temperature)           # Gumbel-softmax state
        z_next = tf.nn.softmax(tf.matmul(z, model.w_dyn))
        recon = tf.reduce_mean(tf.square(tf.matmul(z_next, model.w_dec) - x_next))
        entropy = -tf.reduce_mean(tf.reduce_sum(z * tf.math.log(z + 1e-8), axis=1))
        loss = recon + xent_coef * entropy
    grads = tape.gradient(loss, model.weights)
    for v, g in zip(model.weights, grads):
        v.assign_sub(lr * g)
    return loss


def _schedule(step, steps):
    """Temperature and cross-entropy coefficient: constant in warm-up, then a staircase every 20 steps."""
    start = int(WARMUP * steps)
    if step < start:
        return 1.0, 0.0
    k = (step - start) // ANNEAL_EVERY
    return max(0.05, 1.0 * 0.97 ** k), min(1.0, 0.01 * k)


def _batches(steps):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 16)).astype(np.float32) * 0.3
    for _ in range(steps):
        x = rng.standard_normal((64, 16)).astype(np.float32)
        g = -np.log(-np.log(rng.random((64, 8)) + 1e-9) + 1e-9).astype(np.float32)
        yield tf.constant(x), tf.constant(np.tanh(x @ a)), tf.constant(g)


def leaky(monitor, steps):
    model = SwitchingModel()

    @tf.function
    def train_step(x, x_next, noise, temperature, xent_coef, lr):
        return _step_body(model, x, x_next, noise, temperature, xent_coef, lr)

    for step, (x, x_next, noise) in enumerate(_batches(steps)):
        temperature, xent_coef = _schedule(step, steps)
        train_step(x, x_next, noise, temperature, xent_coef, 0.05)      # Python floats
        monitor.sample(step)


def fixed(monitor, steps):
    model = SwitchingModel()

    @tf.function
    def train_step(x, x_next, noise, temperature, xent_coef, lr):
        return _step_body(model, x, x_next, noise, temperature, xent_coef, lr)

    for step, (x, x_next, noise) in enumerate(_batches(steps)):
        temperature, xent_coef = _schedule(step, steps)
        train_step(x, x_next, noise, tf.constant(temperature), tf.constant(xent_coef), tf.constant(0.05))
        monitor.sample(step)
