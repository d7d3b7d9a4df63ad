"""A multi-source trainer wraps each data source's batches in a dataclass generated from that source's schema and registers the class as a pytree node (``optree.register_pytree_node_class(cls, namespace="keras")``) so that ``keras.tree`` can flatten and map it; a new source arrives every few steps, and the pytree registry keeps every registered class, with the per-source normalisation statistics stored on it, for the rest of the run (``tf.function`` train step; grows once a source, held by a native registry).

Source: metaopt/optree issue #119 "Add API to unregister types in the
pytree node type registry": "There are many use cases in which users only
want to register the pytree node type for temporary use. They want to
remove the type registration when they exit a context", answered by
optree PR #124 "feat(registry): add API to unregister node type in the
registry" (``optree.unregister_pytree_node(cls, namespace=...)``); Keras
itself registers its node types in the ``"keras"`` namespace
(keras-team/keras PR #20886). Fix used here (the PR's API): the trainer
unregisters each source's class when the source is exhausted.
Summary: a 3-head regressor over sensor records whose field set differs
by source (4-8 fields of 8 floats); each class carries the source's
2 x 1,024 float64 normalisation statistics; batches are flattened with
``keras.tree.flatten`` and fed to a ``tf.function`` step.

Here: a source every 25 steps, batches of 32, 20,000 steps (800 sources).
The fixed twin unregisters each source's class when it moves on.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, optree 0.20, TF 2.21 / Keras 3.15; a do-nothing
``monitor.sample``): leaky 568.3 / 572.7 / 577.1 / 581.7 / 586.0 MiB RSS
at 20 / 40 / 60 / 80 % / end (~28 KiB a source: the class, its methods
and its 16 KiB statistics) with gc objects 322,200 / 328,417 / 334,767 /
340,975 / 347,192 (~39 a source), 11.4 s for 20,000 steps (~0.55 ms a
step); fixed 565.7 / 567.4 / 568.1 / 568.2 / 568.2 MiB (settling in the
first half) with objects 316,484 / 316,891 / 316,661 / 316,431 / 316,854
(each unregistered class is freed with its statistics), 11.1 s.
"""
import dataclasses
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import optree
import tensorflow as tf
import keras

SOURCE = "https://github.com/metaopt/optree/issues/119"
SLICE = "holdout15"
STEPS = 20000
STEPS_PER_SOURCE = 25
BATCH = 32
FIELD_DIM = 8
MAX_FIELDS = 8
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["type", "Batch_", "dict", "function", "ndarray", "native"]},
    "fixed": {"verdict_not": "leak"},
}


def _flatten(self):
    names = [f.name for f in dataclasses.fields(self)]
    return [getattr(self, n) for n in names], None, names


def _unflatten(cls, metadata, children):
    return cls(*children)


def _source_class(index, rng):
    n_fields = 4 + index % (MAX_FIELDS - 3)
    fields = [("s%d" % k, object) for k in range(n_fields)]
    stats = np.stack([rng.standard_normal(1024), 1.0 + rng.random(1024)])   # the source's mean / std table
    cls = dataclasses.make_dataclass(
        "Batch_src%05d" % index, fields,
        namespace={"stats": stats, "tree_flatten": _flatten, "tree_unflatten": classmethod(_unflatten)})
    optree.register_pytree_node_class(cls, namespace="keras")              # the leak: never unregistered
    return cls


def _train(monitor, steps, unregister):
    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    w1 = tf.Variable(tf.random.normal((MAX_FIELDS * FIELD_DIM, 64), stddev=0.1))
    w2 = tf.Variable(tf.zeros((64, 3)))
    opt = tf.keras.optimizers.SGD(0.02)
    w_true = rng.standard_normal((MAX_FIELDS * FIELD_DIM, 3)).astype(np.float32) / 8

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.nn.relu(x @ w1) @ w2 - y) ** 2)
        grads = tape.gradient(loss, [w1, w2])
        opt.apply_gradients(zip(grads, [w1, w2]))
        return loss

    cls = None
    for step in range(steps):
        if step % STEPS_PER_SOURCE == 0:
            if cls is not None and unregister:
                optree.unregister_pytree_node(cls, namespace="keras")      # the fix: done with this source
            cls = _source_class(step // STEPS_PER_SOURCE, rng)
        n_fields = len(dataclasses.fields(cls))
        batch = cls(*[rng.standard_normal((BATCH, FIELD_DIM)).astype(np.float32) for _ in range(n_fields)])
        leaves = keras.tree.flatten(keras.tree.map_structure(lambda a: (a - cls.stats[0, 0]) / cls.stats[1, 0],
                                                             batch))
        x = np.zeros((BATCH, MAX_FIELDS * FIELD_DIM), np.float32)
        x[:, :n_fields * FIELD_DIM] = np.concatenate(leaves, axis=1)
        y = x @ w_true
        train_step(tf.constant(x), tf.constant(y))
        monitor.sample(step)
    if cls is not None and unregister:
        optree.unregister_pytree_node(cls, namespace="keras")


def leaky(monitor, steps):
    _train(monitor, steps, unregister=False)


def fixed(monitor, steps):
    _train(monitor, steps, unregister=True)
