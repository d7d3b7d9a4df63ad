"""TF1-style ``Session`` loop that builds a new ``assign`` op (with its value as a constant) every step.

Source: tensorflow/tensorflow#4151 "Memory leak when continuously run assign op"
(``sess.run(tf.assign(a, value))`` in a loop "may add new op to graph every
time, thus the program become very slow and memory explode"), the same leak
as IntelLabs/coach#161 "Changes to avoid memory leak in Rollout worker"
(``v.assign(value)`` at every checkpoint restore created new nodes; fixed by
updating the variables through a placeholder).
Summary: a worker receives new weights from a parameter server every step
and writes them into its graph with ``sess.run(w.assign(new_weights))``; each
call adds a ``Const`` node holding the weights and an ``Assign`` node to the
graph, which the session keeps forever. Fix, as in coach#161: one
``tf.compat.v1.placeholder`` and one assign op made before the loop, fed
through ``feed_dict`` (and ``graph.finalize()``, so any op added later raises).

Here: a 64 x 32 float32 layer (8 KiB) pushed every step, then a training step
of the worker's regression model; TensorFlow 2 with a ``tf.Graph`` and
``tf.compat.v1.Session`` (eager stays on elsewhere).

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +48.2 MiB RSS from 20 % of the run to the end (~124 KiB per step), the
step slowing from 13 ms to ~70 ms as the graph grows; fixed +0.1 MiB, ~1.4 ms a
step.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/tensorflow/tensorflow/issues/4151"
SLICE = "holdout3"
STEPS = 500
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["graph", "Operation", "NodeDef", "native", "rss"]},
    "fixed": {"verdict_not": "leak"},
}


def _build():
    graph = tf.Graph()
    with graph.as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.zeros((64, 32)))
        v = tf.compat.v1.get_variable("v", initializer=tf.zeros((32, 1)))
        x = tf.compat.v1.placeholder(tf.float32, (None, 64))
        y = tf.compat.v1.placeholder(tf.float32, (None, 1))
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(tf.matmul(x, w)), v) - y))
        train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, var_list=[v])
        init = tf.compat.v1.global_variables_initializer()
    sess = tf.compat.v1.Session(graph=graph)
    sess.run(init)
    return graph, sess, w, x, y, loss, train


def _server_weights(rng, step):
    """Stands in for the weights the parameter server sends."""
    return (rng.standard_normal((64, 32)) * 0.1 + 0.001 * step).astype(np.float32)


def _batch(rng):
    xb = rng.standard_normal((32, 64)).astype(np.float32)
    return xb, xb[:, :1] * 0.3


def leaky(monitor, steps):
    rng = np.random.default_rng(0)
    graph, sess, w, x, y, loss, train = _build()
    for step in range(steps):
        with graph.as_default():
            sess.run(w.assign(_server_weights(rng, step)))      # a new Const + Assign node each step
        xb, yb = _batch(rng)
        sess.run([train, loss], feed_dict={x: xb, y: yb})
        monitor.sample(step)
    sess.close()


def fixed(monitor, steps):
    rng = np.random.default_rng(0)
    graph, sess, w, x, y, loss, train = _build()
    with graph.as_default():
        new_w = tf.compat.v1.placeholder(tf.float32, (64, 32))
        assign_w = w.assign(new_w)
    graph.finalize()
    for step in range(steps):
        sess.run(assign_w, feed_dict={new_w: _server_weights(rng, step)})
        xb, yb = _batch(rng)
        sess.run([train, loss], feed_dict={x: xb, y: yb})
        monitor.sample(step)
    sess.close()
