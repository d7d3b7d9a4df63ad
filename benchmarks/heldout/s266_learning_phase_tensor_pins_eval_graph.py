"""An eager ``GradientTape`` training loop evaluates every 50 steps by building a TF1-style evaluation graph (weights folded in as constants) with a Keras-backend-like helper; as TensorFlow issue #42022 reports for ``keras.backend``, outside eager mode the helper stores a learning-phase placeholder ``Tensor`` as the value of ``_GRAPH_LEARNING_PHASES``, a ``weakref.WeakKeyDictionary`` keyed by the graph, and because the value references its own key the graph can never be reclaimed, so every evaluation graph stays alive (TensorFlow eager + ``tf.compat.v1`` graphs; grows in bursts, ~0.3 MiB every 50 steps).

Source: tensorflow/tensorflow issue #42022 "Memory leak in keras.backend
preventing graphs from being GC'ed" (closed): "In some situations (i.e. when
outside of an eager execution context) a Tensor value will be inserted into
``_GRAPH_LEARNING_PHASES``. This is a problem because the Tensor value itself
references the graph which is suppose to be weakly held in memory by this
dictionary. With the implementation of weakref.WeakKeyDictionary a value that
strongly references its key will forever prevent the key from being
reclaimed. This means the entire graph is permanently stuck in memory unless
the entry is explicitly deleted." Fix used here (the report's workaround,
``FIX_LEAK``): the evaluation deletes its graph's entry when it is done.
Summary: the backend is a stand-in with the old ``keras.backend`` shape
(``learning_phase()`` creates a ``placeholder_with_default(False)`` in the
current graph and stores it in ``_GRAPH_LEARNING_PHASES[graph]``). The
evaluation builds, inside ``tf.Graph().as_default()``, the model's forward
pass from ``tf.constant`` weights, selects dropout by the learning-phase
tensor, runs it once in a ``tf.compat.v1.Session`` on a held-out batch and
drops graph and session. The model is a Keras 80-256-128-6 classifier with
dropout, trained eagerly with Adam on batches of 64.

Here: 3,000 steps (60 evaluations). The fixed evaluation deletes its entry.
"""
import collections
import os
import weakref

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/tensorflow/tensorflow/issues/42022"
SLICE = "holdout22"
STEPS = 3000
EVERY = 50
BATCH = 64
FEATURES = 80
CLASSES = 6
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Graph", "tensorflow", "Tensor", "Operation", "native"],
              "holder_any": ["_GRAPH_LEARNING_PHASES", "LEARNING_PHASES"]},
    "fixed": {"verdict_not": "leak"},
}

_GRAPH_LEARNING_PHASES = weakref.WeakKeyDictionary()


def learning_phase():
    graph = tf.compat.v1.get_default_graph()
    if graph not in _GRAPH_LEARNING_PHASES:
        _GRAPH_LEARNING_PHASES[graph] = tf.compat.v1.placeholder_with_default(False, shape=(), name="keras_learning_phase")
    return _GRAPH_LEARNING_PHASES[graph]


def _evaluate(model, x, y, delete_entry):
    weights = [w.numpy() for w in model.weights]
    graph = tf.Graph()
    with graph.as_default():
        inp = tf.compat.v1.placeholder(tf.float32, (None, FEATURES))
        training = learning_phase()
        h = inp
        for i in range(0, len(weights), 2):
            h = tf.matmul(h, tf.constant(weights[i])) + tf.constant(weights[i + 1])
            if i + 2 < len(weights):
                h = tf.nn.relu(h)
                h = tf.cond(training, lambda h=h: tf.nn.dropout(h, 0.2), lambda h=h: h)
        acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(h, 1, output_type=tf.int32), y), tf.float32))
        with tf.compat.v1.Session(graph=graph) as sess:
            value = float(sess.run(acc, {inp: x}))
    if delete_entry:                                     # the report's FIX_LEAK
        del _GRAPH_LEARNING_PHASES[graph]
    return value


def _run(monitor, steps, delete_entry):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    yv = rng.integers(0, CLASSES, 256).astype(np.int32)
    xv = (centers[yv] + 1.4 * rng.standard_normal((256, FEATURES))).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dropout(0.2), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dropout(0.2), keras.layers.Dense(CLASSES)])
    opt = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    accs = collections.deque(maxlen=20)
    for step in range(steps):
        y = rng.integers(0, CLASSES, BATCH).astype(np.int32)
        x = (centers[y] + 1.4 * rng.standard_normal((BATCH, FEATURES))).astype(np.float32)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if step % EVERY == EVERY - 1:
            accs.append(_evaluate(model, xv, yv, delete_entry))
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, delete_entry=False)


def fixed(monitor, steps):
    _run(monitor, steps, delete_entry=True)
