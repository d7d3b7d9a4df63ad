"""Once the sparsity regulariser switches on after the warm-up (at 40 % of the run), a TF1-era helper ported into an eager ``GradientTape`` loop records each step's hidden activations and penalty with ``tf.compat.v1.add_to_collection``, as it did in graph mode; in eager mode the collections of the global default graph keep every step's ``EagerTensor`` for the rest of the run (eager TensorFlow; late onset).

Source: tensorflow/tensorflow#20062 "Memory leak using loss in Eager
Execution" (``tf.losses.sparse_softmax_cross_entropy`` and the other
TF1 losses added every computed loss to the ``LOSSES`` collection, which
in eager mode kept every step's tensor alive; memory grew linearly with
the steps). The fix TensorFlow made, and the one used here: only add to
a graph collection when building a graph (``if not
tf.executing_eagerly()``); in eager mode the helper hands the values to
the caller, who uses them and lets them go.
Summary: a sparse autoencoder-style classifier with a KL sparsity
penalty on its hidden units; the penalty helper keeps the
``add_to_collection`` calls that fed TF1 summaries.

Here: batches of 32 x 64 float32 inputs, a 64-128-10 model with
variables trained eagerly with SGD, 9,000 steps; from step 3,600 the
helper stores the 32 x 128 activations (16 KiB) and the penalty in two
collections each step. The fixed twin's helper skips the collections
when executing eagerly.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21; a do-nothing ``monitor.sample``): leaky
543.1 / 544.9 / 579.6 / 614.5 / 649.3 MiB RSS at 20 / 40 / 60 / 80 % /
end (flat until the onset, then ~19.7 KiB a step) with gc objects
313,379 / 313,380 / 317,245 / 320,845 / 324,445 (two tensors a step
after the onset), 13.7 s for 9,000 steps (~1.7 ms a step before the
onset, ~1.95 ms after); fixed 543.3 / 545.7 / 546.8 / 546.9 / 546.9 MiB
with objects flat after the onset (313,647 -> 313,649), 13.0 s.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/tensorflow/tensorflow/issues/20062"
SLICE = "holdout13"
STEPS = 9000
ONSET = 0.4
BATCH = 32
FEATURES = 64
HIDDEN = 128
CLASSES = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor"],
              "holder_any": ["collection", "Graph"]},
    "fixed": {"verdict_not": "leak"},
}


def sparsity_penalty(h, target=0.05, graph_collections=True):
    """KL(target || mean activation) per hidden unit, TF1 style."""
    rho = tf.clip_by_value(tf.reduce_mean(h, axis=0), 1e-4, 1 - 1e-4)
    kl = tf.reduce_sum(target * tf.math.log(target / rho) + (1 - target) * tf.math.log((1 - target) / (1 - rho)))
    if graph_collections or not tf.executing_eagerly():     # the fix: collections only when building a graph
        tf.compat.v1.add_to_collection("sparse_activations", h)
        tf.compat.v1.add_to_collection("sparsity_penalties", kl)
    return kl


def _train(monitor, steps, graph_collections):
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    w1 = tf.Variable(rng.normal(size=(FEATURES, HIDDEN)).astype(np.float32) * 0.1)
    b1 = tf.Variable(tf.zeros([HIDDEN]))
    w2 = tf.Variable(tf.zeros([HIDDEN, CLASSES]))
    params = [w1, b1, w2]
    onset = int(steps * ONSET)
    for step in range(steps):
        y = rng.integers(0, CLASSES, BATCH)
        x = tf.constant(centers[y] + rng.standard_normal((BATCH, FEATURES), dtype=np.float32))
        with tf.GradientTape() as tape:
            h = tf.sigmoid(tf.matmul(x, w1) + b1)
            logits = tf.matmul(h, w2)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(tf.constant(y), logits))
            if step >= onset:                                  # sparsity switched on after the warm-up
                loss = loss + 0.01 * sparsity_penalty(h, graph_collections=graph_collections)
        grads = tape.gradient(loss, params)
        for v, g in zip(params, grads):
            v.assign_sub(0.1 * g)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, graph_collections=True)


def fixed(monitor, steps):
    _train(monitor, steps, graph_collections=False)
