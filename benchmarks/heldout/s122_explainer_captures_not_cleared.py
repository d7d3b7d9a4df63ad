"""At every validation round an attribution pass (DeepLIFT-style) wraps each layer to capture its input and output, and ``_clear_hooks()`` unwraps the layers but does not drop the captured tensors, which sit in a dict owned by the running ``train()`` keyed by round and layer; every round adds a full set of activations (eager Keras model; grows once per validation round).

Source: jmschrei/tangermeme#84 "Fixed GPU memory leak in deep_lift_shap.py"
("``_clear_hooks()`` did not clear detached input/output tensors, keeping
it in GPU memory. Fixed by explicitly deleting ``module.input``,
``module.output`` when ``_clear_hooks()`` is called ... ``module.input``
and ``module.output`` stores detached input and activations. However,
they are never cleared even when _clear_hooks() is called (as this only
clears the hooks themselves)"). Fix, from the PR: ``_clear_hooks()``
deletes the captured inputs and outputs along with the hooks.
Summary: a Keras MLP is trained eagerly with a ``tf.function`` step.
Every 100 steps a validation round computes attributions for 128
held-out examples: ``attach_hooks`` replaces each Dense layer's ``call``
with a wrapper that stores ``(input, output)`` in ``captured[(round,
layer.name)]``, a dict created by ``train()`` so that the report at the
end could look at the last round; ``clear_hooks`` restores ``call`` only.
The activations of every round (EagerTensors, ~0.4 MiB a round) stay
referenced from ``train()``'s local dict.

Here: 128 x 64 float32 validation inputs, a 64-512-256-10 Keras MLP
(batches of 32). The fixed twin's ``clear_hooks`` also pops
the captured tensors.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky
581.5 / 591.1 / 620.0 MiB RSS at 20 % / 40 % / end (~0.4 MiB a round, in
steps every 100 steps) and gc objects 325,447 / 325,663 / 326,311 (+9 a
round: the tuples and EagerTensors), fixed 571.6 / 574.2 / 575.0 MiB with
objects flat (325,230); ~1.1 ms a step (13.5 s leaky, 12.2 s fixed for
12,000 steps).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/jmschrei/tangermeme/pull/84"
SLICE = "holdout10"
STEPS = 12000
VAL_EVERY = 100
BATCH = 32
VAL = 128
FEATURES = 64
CLASSES = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "tuple", "dict", "native"],
              "holder_any": ["captured", "train"]},
    "fixed": {"verdict_not": "leak"},
}


def attach_hooks(model, captured, round_id):
    for layer in model.layers:
        original = layer.call

        def wrapped(inputs, *args, _layer=layer, _original=original, **kwargs):
            out = _original(inputs, *args, **kwargs)
            captured[(round_id, _layer.name)] = (tf.stop_gradient(inputs), tf.stop_gradient(out))
            return out

        layer._original_call = original
        layer.call = wrapped


def clear_hooks(model, captured, round_id, drop_captures):
    for layer in model.layers:
        layer.call = layer._original_call
        del layer._original_call
        if drop_captures:                                     # the fix (tangermeme#84)
            captured.pop((round_id, layer.name), None)


def _attributions(model, x, captured, round_id):
    baseline = tf.zeros_like(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = model(x, training=False)
        target = tf.reduce_sum(tf.reduce_max(out, axis=1))
    grads = tape.gradient(target, x)
    return (x - baseline) * grads


def _train(monitor, steps, drop_captures):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    val_y = rng.integers(0, CLASSES, VAL)
    val_x = tf.constant(centers[val_y] + rng.standard_normal((VAL, FEATURES), dtype=np.float32))
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(512, activation="relu"),
                              keras.layers.Dense(256, activation="relu"), keras.layers.Dense(CLASSES)])
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    captured = {}                       # kept by train() "for the end-of-run report"
    saliency = None
    for step in range(steps):
        y = rng.integers(0, CLASSES, BATCH).astype(np.int32)
        x = centers[y] + rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
        train_step(x, y)
        if step % VAL_EVERY == VAL_EVERY - 1:
            round_id = step // VAL_EVERY
            attach_hooks(model, captured, round_id)
            try:
                saliency = _attributions(model, val_x, captured, round_id)
            finally:
                clear_hooks(model, captured, round_id, drop_captures)
        monitor.sample(step)
    return saliency


def leaky(monitor, steps):
    _train(monitor, steps, drop_captures=False)


def fixed(monitor, steps):
    _train(monitor, steps, drop_captures=True)
