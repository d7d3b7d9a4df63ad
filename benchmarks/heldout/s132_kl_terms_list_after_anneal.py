"""Mean-field Bayesian dense layers collect their per-weight KL divergence in a plain Python list on the layer instead of ``add_loss``, expecting it to be cleared like ``layer.losses``; KL annealing switches the term on at 35 % of the run, and from then on every step leaves each layer's KL tensor in the list (eager ``GradientTape`` loop; late onset).

Source: tensorflow/probability#127 "Support Eager mode in TFP Layers"
("TFP Layers use ``self.add_loss`` in order to accumulate regularizers
on TensorFlow Distributions ... (e.g., KL penalties for variational
inference). This is not supported in Eager mode"; wenkesj: "TensorFlow
uses a ``list`` to keep track of the losses; adding to a ``list`` each
iteration of ``layer.call`` will continue to grow the ``list``"). Fix:
``self.add_loss(kl)``, which Keras 3 resets at every top-level call, and
``sum(model.losses)`` in the step.
Summary: a classifier with two ``BayesDense`` layers (weight means and
softplus scales, one reparameterised weight sample per call) is trained
with a KL weight that stays at 0 for the first 35 % of the run and then
ramps up. Each layer, once the weight is positive, computes the KL of
its weight posterior to a unit Gaussian for every weight and appends
that tensor to ``self.kl_terms``; the step sums only the last entry.
The list keeps every step's tensors (64 x 256 and 256 x 10 floats, ~74
KiB a step, as eager tensors).

Here: 64 input features, ``BayesDense(256)`` and ``BayesDense(10)``
(weight noise from a ``keras.random.SeedGenerator``), batches of 32,
Adam. The fixed twin calls ``self.add_loss``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21
/ Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky
548.5 / 555.7 / 628.1 MiB RSS at 20 % / 40 % / end (the onset is at 35
%: ~75 KiB a step afterwards) with gc objects 315,322 / 315,971 /
319,571 (~4 a step after the onset); fixed 548.6 / 551.2 / 552.2 MiB
(the first ``add_loss`` steps), objects 315,322 / 315,531 / 315,531; ~13
ms a step (19.7 s each for 1,500 steps).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/tensorflow/probability/issues/127"
SLICE = "holdout11"
STEPS = 1500
ANNEAL_START = 0.35
BATCH = 32
FEATURES = 64
HIDDEN = 256
CLASSES = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "BayesDense", "list"],
              "holder_any": ["kl_terms", "BayesDense", "bayes"]},
    "fixed": {"verdict_not": "leak"},
}


class BayesDense(keras.layers.Layer):
    def __init__(self, units, use_add_loss, activation=None, **kwargs):
        super().__init__(**kwargs)
        self.units, self.use_add_loss = units, use_add_loss
        self.activation = keras.activations.get(activation)
        self.kl_weight = 0.0
        self.kl_terms = []

    def build(self, input_shape):
        d = input_shape[-1]
        self.mu = self.add_weight(shape=(d, self.units), initializer="glorot_uniform", name="mu")
        self.rho = self.add_weight(shape=(d, self.units), initializer=keras.initializers.Constant(-5.0), name="rho")
        self.bias = self.add_weight(shape=(self.units,), initializer="zeros", name="bias")
        self.noise = keras.random.SeedGenerator(7)

    def call(self, x):
        sigma = tf.nn.softplus(self.rho)
        w = self.mu + sigma * keras.random.normal(tuple(self.mu.shape), seed=self.noise)
        if self.kl_weight > 0.0:
            kl = 0.5 * (sigma ** 2 + self.mu ** 2 - 1.0) - tf.math.log(sigma)      # per weight
            if self.use_add_loss:
                self.add_loss(self.kl_weight * tf.reduce_sum(kl))                  # the fix
            else:
                self.kl_terms.append(kl)                                            # the leak: never cleared
        return self.activation(tf.matmul(x, w) + self.bias)


def _train(monitor, steps, use_add_loss):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    layers = [BayesDense(HIDDEN, use_add_loss, activation="relu"), BayesDense(CLASSES, use_add_loss)]
    model = keras.Sequential([keras.Input((FEATURES,))] + layers)
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    start = int(steps * ANNEAL_START)
    n_train = 60000.0
    for step in range(steps):
        beta = 0.0 if step < start else min(1.0, (step - start) / (0.3 * steps)) / n_train
        for layer in layers:
            layer.kl_weight = beta
        y = rng.integers(0, CLASSES, BATCH)
        x = centers[y] + rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
            if beta > 0.0:
                if use_add_loss:
                    loss += tf.add_n(model.losses)
                else:
                    loss += beta * tf.add_n([tf.reduce_sum(layer.kl_terms[-1]) for layer in layers])
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, use_add_loss=False)


def fixed(monitor, steps):
    _train(monitor, steps, use_add_loss=True)
