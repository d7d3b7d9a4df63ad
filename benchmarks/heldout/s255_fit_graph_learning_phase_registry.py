"""A Keras job exports a frozen inference graph at the end of every epoch (weights folded in as constants, for a TF1-style serving stack) and, like Keras's backend before TensorFlow issue #19407 was fixed, sets the learning phase for that graph through a helper that records it in a module-level dict keyed by the graph; the dict is a plain ``dict``, so every exported ``tf.Graph`` (with its constant-folded weights) stays alive for the rest of the run (``model.fit`` + ``LeakCallback``; grows once an epoch, ~0.45 MiB an epoch: a graph holding the 96-256-256-8 model's weights as ``Const`` ops).

Source: tensorflow/tensorflow issue #19407 "Using estimators created by
``tf.keras.estimator.model_to_estimator`` in ``tf.estimator.train_and_evaluate``
causes a memory leak of sorts": "the default graphs that are created end up
referenced in ``_GRAPH_LEARNING_PHASES`` and never deallocated (so sort of a
memory leak). This is due to a call to ``keras.backend.set_learning_phase``
that's done as part of the created ``model_fn``, which uses the default graph
as a key into ``_GRAPH_LEARNING_PHASES``." Keras later made the registry a
``weakref.WeakKeyDictionary`` (and issue #42022 showed that its values must not
be tensors of the graph, or the weak key is kept alive by its own value). Fix
used here: the registry is a ``WeakKeyDictionary`` whose values are plain
Python ints, so an exported graph is freed once the export is written.
Summary: the backend is a small stand-in with the shape of the old Keras
backend (``set_learning_phase(value)`` stores ``value`` for
``tf.compat.v1.get_default_graph()``, ``learning_phase()`` reads it). The
export callback builds, inside ``tf.Graph().as_default()``, a placeholder and
the model's forward pass from ``tf.constant`` weights, calls
``set_learning_phase(0)``, serialises the ``GraphDef`` to a temporary file
(the last two exports are kept on disk) and drops the graph. The model is a
Keras 96-256-256-8 classifier trained with ``model.fit`` (Adam, batches of
64, 50 batches an epoch).

Here: 3,000 batches (60 epochs). The fixed backend keeps a
``WeakKeyDictionary`` of ints.
"""
import os
import shutil
import tempfile
import weakref

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/tensorflow/tensorflow/issues/19407"
SLICE = "holdout22"
STEPS = 3000            # batches; 50 per epoch, 60 epochs
PER_EPOCH = 50
BATCH = 64
FEATURES = 96
CLASSES = 8
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Graph", "tensorflow", "Operation", "native"],
              "holder_any": ["_GRAPH_LEARNING_PHASES", "LEARNING_PHASES"]},
    "fixed": {"verdict_not": "leak"},
}


class _Backend:
    """Old Keras backend learning-phase bookkeeping."""

    def __init__(self, weak):
        global _GRAPH_LEARNING_PHASES
        _GRAPH_LEARNING_PHASES = weakref.WeakKeyDictionary() if weak else {}

    @staticmethod
    def set_learning_phase(value):
        graph = tf.compat.v1.get_default_graph()
        _GRAPH_LEARNING_PHASES[graph] = int(value)

    @staticmethod
    def learning_phase():
        return _GRAPH_LEARNING_PHASES.get(tf.compat.v1.get_default_graph(), 0)


_GRAPH_LEARNING_PHASES = {}


class FrozenGraphExport(keras.callbacks.Callback):
    def __init__(self, backend, out_dir):
        super().__init__()
        self.backend = backend
        self.out_dir = out_dir
        self.exports = 0

    def on_epoch_end(self, epoch, logs=None):
        weights = [w.numpy() for w in self.model.weights]
        graph = tf.Graph()
        with graph.as_default():
            self.backend.set_learning_phase(0)
            x = tf.compat.v1.placeholder(tf.float32, (None, FEATURES), name="features")
            h = x
            for i in range(0, len(weights), 2):
                kernel = tf.constant(weights[i], name="kernel_%d" % (i // 2))
                bias = tf.constant(weights[i + 1], name="bias_%d" % (i // 2))
                h = tf.matmul(h, kernel) + bias
                if i + 2 < len(weights):
                    h = tf.nn.relu(h)
            tf.nn.softmax(h, name="probabilities")
        path = os.path.join(self.out_dir, "frozen_%04d.pb" % epoch)
        with open(path, "wb") as fh:
            fh.write(graph.as_graph_def().SerializeToString())
        old = os.path.join(self.out_dir, "frozen_%04d.pb" % (epoch - 2))
        if os.path.exists(old):
            os.remove(old)
        self.exports += 1
        del graph


def _fit(logdir, steps, weak):
    keras.utils.set_random_seed(0)
    backend = _Backend(weak)
    out_dir = tempfile.mkdtemp(prefix="s255_")
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, PER_EPOCH * BATCH)
    x = (centers[y] + 1.3 * rng.standard_normal((len(y), FEATURES))).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(256, activation="relu"), keras.layers.Dense(CLASSES)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    try:
        model.fit(x, y.astype(np.int32), batch_size=BATCH, epochs=max(1, steps // PER_EPOCH), verbose=0,
                  shuffle=True, callbacks=[FrozenGraphExport(backend, out_dir),
                                           tb_leak_plugin.keras.LeakCallback(logdir)])
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def leaky_fit(logdir, steps):
    _fit(logdir, steps, weak=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, weak=True)
