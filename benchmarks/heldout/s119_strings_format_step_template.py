"""An eager training loop formats its periodic log line with ``tf.strings.format`` and bakes the step number into the *template*; the template is an op attribute, so every call is a new kernel that TensorFlow's eager context caches and never evicts (``tf.function`` train step; native memory only, gc counts flat).

Source: tensorflow/tensorflow#19671 "Variables may live longer than they
suppose to on Eager Execution" (the eager kernel cache "expands as more
and more ... are created since we cache based on the attributes"), and
tensorflow/tensorflow#42337 "Limit size of kernel cache" ("The
``EagerContext`` class caches instances of kernels ... there is no limit
on the number of kernels cached. As a result ... the size of the kernel
cache grows in an unbounded fashion"; the cap was not merged). Fix, the
usual one for attribute-driven cache growth: keep the attribute constant
and pass what varies as an input, here
``tf.strings.format("step {} loss {} acc {}", [step, loss, acc])``.
Summary: a Keras MLP is trained with a ``tf.function`` step; every 8
steps the loop builds a log line for a streaming log shipper with
``tf.strings.format("step %d: loss {} acc {}" % step, [loss, acc])``. Each
template string is a distinct ``template`` attribute of the
``StringFormat`` op, so each call instantiates and caches a new kernel in
native memory (~35-40 KiB each); no Python object is created or kept.

Here: batches of 32 x 64 float32 features, a 64-128-10 Keras MLP. The
fixed twin passes the step as a tensor input of one constant template.
Corrected after the slice was opened: the fixed twin first passed
``tf.constant(step)`` with ``step`` a Python int, and its C heap grew ~72 B a
step (glibc ``mallinfo2``, +1.3 MiB over 20,000 steps in each of four
recorded runs): TensorFlow keeps native memory for every new Python scalar it
converts (measured alone: ``tf.constant(i)`` for 25,000 new ints, +560 B a
call; ``tf.constant(0)`` repeated or ``tf.constant(np.int32(i))``, flat;
the eager scalar caching described in ROCm/tensorflow-upstream#1149). The
fixed twin now converts a NumPy ``int32``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky
731.3 / 750.0 / 805.9 MiB RSS at 20 % / 40 % / end (~4.8 KiB a step, ~38
KiB per formatted line) with gc objects flat (323,031 at every mark) and
tracemalloc flat (162.5 MiB: the growth is outside Python's allocator),
fixed 713.8 / 716.3 / 716.4 MiB, same objects; ~0.97 ms a step leaky,
~0.82 ms fixed (19.4 s and 16.4 s for 20,000 steps).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/tensorflow/tensorflow/issues/19671"
SLICE = "holdout10"
STEPS = 20000
LOG_EVERY = 8
BATCH = 32
FEATURES = 64
CLASSES = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "kernel", "malloc"]},
    "fixed": {"verdict_not": "leak"},
}


def _train(monitor, steps, constant_template):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        acc = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), y), tf.float32))
        return loss, acc

    shipped = []
    for step in range(steps):
        y = rng.integers(0, CLASSES, BATCH).astype(np.int32)
        x = centers[y] + rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
        loss, acc = train_step(x, y)
        if step % LOG_EVERY == 0:
            if constant_template:
                # np.int32, not a Python int: tf.constant(python_int) with a new value
                # each call keeps ~560 B of native memory per value (see the docstring)
                line = tf.strings.format("step {}: loss {} acc {}", [tf.constant(np.int32(step)), loss, acc])
            else:
                line = tf.strings.format("step %d: loss {} acc {}" % step, [loss, acc])   # a new attr per call
            shipped.append(line.numpy())
            shipped = shipped[-64:]                     # the shipper's send buffer
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, constant_template=False)


def fixed(monitor, steps):
    _train(monitor, steps, constant_template=True)
