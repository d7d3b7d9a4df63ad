"""A denoising-autoencoder loop draws each step's corruption noise eagerly with ``keras.random.normal(..., seed=keras.random.SeedGenerator(step))`` "so that every step is reproducible", building a new ``SeedGenerator`` (a new uniquely named state variable) every step; no Python object accumulates, but the process grows by tens of KiB a step in native memory (``tf.function`` train step; native memory only, gc counts flat).

Source: keras-team/keras-io PR #1693 "DCGAN overriding training step -
Keras 3 Migration", review by fchollet: random draws "need to be seeded
with a ``SeedGenerator`` instance attached to the model" ("The seed
generator must be attached to the layer"), created once in
``__init__`` and passed to every ``keras.random`` call, instead of a
seed made up per call. Fix used here (the review's): one
``SeedGenerator`` made once and reused, whose state variable advances
at every draw.
Summary: a denoising autoencoder on 64-feature sensor windows; the
noise is drawn outside the compiled step (eagerly) and passed in.

Here: batches of 512 x 64 float32 windows, a 64-32-64 autoencoder with
a ``tf.function`` step (SGD on the reconstruction loss), 10,000 steps.
The fixed twin makes its ``SeedGenerator(0)`` once.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; a do-nothing ``monitor.sample``): leaky
620.0 / 689.7 / 761.5 / 840.1 / 900.8 MiB RSS at 20 / 40 / 60 / 80 % /
end (~36 KiB a step) with gc objects flat (316,073 -> 316,077), 18.4 s
for 10,000 steps (~1.8 ms a step, against ~1.05 ms with one
generator); fixed 551.6 / 551.6 / 552.1 / 552.2 / 553.7 MiB with objects
flat (316,072 -> 316,076), 10.6 s.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/keras-team/keras-io/pull/1693"
SLICE = "holdout13"
STEPS = 10000
BATCH = 512
FEATURES = 64
CODE = 32
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "SeedGenerator", "Variable"]},
    "fixed": {"verdict_not": "leak"},
}


def _train(monitor, steps, reuse_generator):
    rng = np.random.default_rng(0)
    basis = rng.normal(size=(8, FEATURES)).astype(np.float32)
    enc = tf.Variable(rng.normal(size=(FEATURES, CODE)).astype(np.float32) * 0.1)
    dec = tf.Variable(rng.normal(size=(CODE, FEATURES)).astype(np.float32) * 0.1)
    params = [enc, dec]
    opt = tf.keras.optimizers.SGD(0.05)

    @tf.function
    def train_step(x, noise):
        with tf.GradientTape() as tape:
            code = tf.nn.relu(tf.matmul(x + noise, enc))
            loss = tf.reduce_mean(tf.square(tf.matmul(code, dec) - x))
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss

    seed_gen = keras.random.SeedGenerator(0) if reuse_generator else None   # the fix: made once
    for step in range(steps):
        x = tf.constant(rng.standard_normal((BATCH, 8), dtype=np.float32) @ basis)
        gen = seed_gen if reuse_generator else keras.random.SeedGenerator(step)  # the leak: one a step
        noise = keras.random.normal((BATCH, FEATURES), stddev=0.3, seed=gen)
        train_step(x, noise)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, reuse_generator=False)


def fixed(monitor, steps):
    _train(monitor, steps, reuse_generator=True)
