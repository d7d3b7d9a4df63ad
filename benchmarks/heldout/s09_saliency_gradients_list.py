"""Appending each batch's input gradient (saliency) tensor to a list.

Source: "Out of memory OOM using tensorflow gradient tape but only happens when I
append a list" (Stack Overflow question, mirrored at https://e-learn.cn/topic/4021299).
Summary: a custom GradientTape training loop also computes the gradient of the
loss w.r.t. the input batch and appends it to ``sa_input`` every batch; training
runs out of memory, and removing the append makes it run through. The answer:
do not keep per-batch gradient tensors around; reduce them as you go (here a
running per-feature saliency sum in a variable).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://e-learn.cn/topic/4021299 (Stack Overflow: OOM using gradient tape but only happens when I append a list)"
SLICE = "tune"
STEPS = 800
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "tensors"]},
    "fixed": {"verdict_not": "leak"},
}

FEATURES = 256


def _setup():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input(shape=(FEATURES,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(2),
    ])
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = keras.optimizers.SGD(0.01)
    rng = np.random.default_rng(0)
    x_all = rng.standard_normal((4096, FEATURES), dtype=np.float32)
    y_all = rng.integers(0, 2, size=(4096,))
    ds = tf.data.Dataset.from_tensor_slices((x_all, y_all)).shuffle(4096, seed=0).batch(32).repeat()
    return model, loss_fn, opt, iter(ds)


def _train_step(model, loss_fn, opt, x, y_true):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y_pred = model(x, training=True)
        loss = loss_fn(y_true, y_pred)
    gradients, saliency = tape.gradient(loss, (model.trainable_variables, x))
    opt.apply_gradients(zip(gradients, model.trainable_variables))
    return saliency


def leaky(monitor, steps):
    model, loss_fn, opt, it = _setup()
    sa_input = []
    for step in range(steps):
        x, y = next(it)
        sa_input.append(_train_step(model, loss_fn, opt, x, y))   # 32 KiB tensor kept per batch
        monitor.sample(step)


def fixed(monitor, steps):
    model, loss_fn, opt, it = _setup()
    saliency_sum = tf.Variable(tf.zeros((FEATURES,)))
    for step in range(steps):
        x, y = next(it)
        sal = _train_step(model, loss_fn, opt, x, y)
        saliency_sum.assign_add(tf.reduce_sum(tf.abs(sal), axis=0))
        monitor.sample(step)
