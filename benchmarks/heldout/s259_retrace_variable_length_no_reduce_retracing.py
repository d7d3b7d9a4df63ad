"""A text classifier is fine-tuned on unbucketed, unpadded batches, each batch as long as its longest document, through a ``tf.function`` train step without an ``input_signature``; as TensorFlow issue #124972 reports for TF 2.21, every new sequence length makes a new trace and every traced graph stays cached in the function for as long as it lives, so memory grows with each length not seen before (TensorFlow ``tf.function``; grows at every new length, ~250 of them over the run (half in the first 20 %), fast at first and slower as lengths repeat; each step that traces costs tens of milliseconds).

Source: tensorflow/tensorflow issue #124972 "@tf.function re-tracing causes
unbounded memory growth — traced graphs are never garbage collected"
(TF 2.21.0, open): "When a @tf.function-decorated function is called with
inputs of varying tensor shapes (which is extremely common in NLP/serving
workloads with variable-length sequences), TensorFlow triggers a re-trace
for each new input signature. ... Each traced computational graph is
permanently cached in memory and is never released". Fix used here (the
one TensorFlow's own retracing warning and documentation give):
``tf.function(reduce_retracing=True)``, which after the second length traces
a generalised ``[None, None]`` signature once; two or three traces at the
start, then flat.
Summary: documents are token-id sequences of 16 to 470 tokens drawn from a
skewed length distribution; each batch of 32 is padded to its own longest
document. The model is a Keras embedding (4,000 x 32), global average
pooling, 64-unit dense layer and a 5-way head, trained with Adam.

Here: 1,200 steps. The fixed step is built with ``reduce_retracing=True``.
"""
import collections
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/tensorflow/tensorflow/issues/124972"
SLICE = "holdout22"
STEPS = 1200
BATCH = 32
VOCAB = 4000
CLASSES = 5
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["retracing", "traces", "ConcreteFunction", "FuncGraph",
                                                 "tensorflow", "native"]},
    "fixed": {"verdict_not": "leak"},
}


def _run(monitor, steps, reduce_retracing):
    tf.get_logger().setLevel("ERROR")
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    model = keras.Sequential([keras.Input((None,), dtype="int32"), keras.layers.Embedding(VOCAB, 32),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    opt = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def _step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    train_step = tf.function(_step, reduce_retracing=reduce_retracing)
    losses = collections.deque(maxlen=100)
    for step in range(steps):
        lengths = np.minimum(16 + rng.gamma(2.0, 60.0, BATCH).astype(int), 470)
        longest = int(lengths.max())
        x = np.zeros((BATCH, longest), np.int32)
        for i, n in enumerate(lengths):
            x[i, :n] = rng.integers(1, VOCAB, n)
        y = (x[:, 0] % CLASSES).astype(np.int32)
        losses.append(float(train_step(tf.constant(x), tf.constant(y))))
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, reduce_retracing=False)


def fixed(monitor, steps):
    _run(monitor, steps, reduce_retracing=True)
