"""A classifier trained with a ``tf.function`` step prints a verbose progress block every step and, every 100 steps, captures a printed per-class validation report by swapping ``sys.stdout`` for a ``StringIO`` and swapping it back after the call, without ``try/finally``; while the model still never predicts some class the report raises ``ZeroDivisionError``, the caller skips that round, and ``sys.stdout`` stays the capture buffer: from the last such round on, every progress line of the run is appended to an in-memory ``StringIO`` that nobody reads (TF; grows every step once the early failing rounds are over).

Source: ooici/ioncore-python pull request #68 "Stdout", which added
``capture_function_stdout`` (``stdout = sys.stdout; sys.stdout =
fstream; func(*args, **kwargs)`` ...), with the review: "I would wrap the
call in a try/finally to ensure that sys.stdout is restored"; the same
omission fixed in ecrl/ecabc pull request #13 "Fixed the missing
replacement of sys.stdout". Fix used here (the review's):
``contextlib.redirect_stdout``, which restores ``sys.stdout`` in its
``__exit__`` whatever the report raises.
Summary: a 32-64-10 softmax classifier (Adam, batch 64) on Gaussian
clusters; the progress block (~1,300 characters: loss, accuracy, per-class
probabilities and counts, gradient norms, a per-class table) goes to
``sys.stdout`` every step; the report computes per-class precision and
recall on 512 validation rows and divides by the number of rows predicted
as the class.

Here: 12,000 steps. The fixed twin uses ``redirect_stdout``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21; a do-nothing ``monitor.sample``): leaky 560.9 /
564.5 / 570.5 / 572.3 / 575.7 MiB RSS at 20 / 40 / 60 / 80 % / end (the
report at step 100 raised, so ~1.3 KB of text a step went into the
``StringIO`` from there on, 15.6 MB in all; it grows in steps as the
buffer is reallocated) with gc objects 320,913 -> 320,918, 24.6 s for
12,000 steps (~2 ms a step); fixed 556.0 / 557.8 / 558.5 / 558.5 / 558.5
MiB with objects 320,911 -> 320,915, 22.8 s.
"""
import contextlib
import io
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/ooici/ioncore-python/pull/68"
SLICE = "holdout16"
STEPS = 12000
REPORT_EVERY = 100
FEATURES = 32
CLASSES = 10
BATCH = 64
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "StringIO", "str", "rss"],
              "holder_any": ["stdout", "sys", "StringIO"]},
    "fixed": {"verdict_not": "leak"},
}


def capture_function_stdout(func, *args, **kwargs):
    """The leak: restores sys.stdout only when func returns normally."""
    fstream = io.StringIO()
    stdout = sys.stdout
    sys.stdout = fstream
    func(*args, **kwargs)
    sys.stdout = stdout
    return fstream.getvalue()


def capture_function_stdout_safe(func, *args, **kwargs):
    """The fix: redirect_stdout restores sys.stdout in __exit__."""
    fstream = io.StringIO()
    with contextlib.redirect_stdout(fstream):
        func(*args, **kwargs)
    return fstream.getvalue()


def print_classification_report(y_true, y_pred):
    print("class  precision  recall  support")
    for k in range(CLASSES):
        predicted = int((y_pred == k).sum())
        support = int((y_true == k).sum())
        tp = int(((y_pred == k) & (y_true == k)).sum())
        print("%5d  %9.3f  %6.3f  %7d" % (k, tp / predicted, tp / max(support, 1), support))


def _train(monitor, steps, safe):
    real_stdout = sys.stdout
    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)) * 1.2
    w1 = tf.Variable(tf.random.normal((FEATURES, 64), stddev=0.15))
    w2 = tf.Variable(tf.zeros((64, CLASSES)))
    b2 = tf.Variable(tf.concat([[3.0], tf.zeros(CLASSES - 1)], 0))    # starts out predicting class 0
    opt = tf.keras.optimizers.Adam(2e-4)

    def batch(n):
        y = rng.integers(0, CLASSES, n)
        return (centers[y] + 1.5 * rng.standard_normal((n, FEATURES))).astype(np.float32), y

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = tf.nn.relu(x @ w1) @ w2 + b2
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        grads = tape.gradient(loss, [w1, w2, b2])
        opt.apply_gradients(zip(grads, [w1, w2, b2]))
        return loss, tf.nn.softmax(logits), [tf.norm(g) for g in grads]

    @tf.function
    def predict(x):
        return tf.argmax(tf.nn.relu(x @ w1) @ w2 + b2, -1)

    xv, yv = batch(512)
    capture = capture_function_stdout_safe if safe else capture_function_stdout
    reports, skipped = [], 0
    try:
        for step in range(steps):
            x, y = batch(BATCH)
            loss, probs, gnorms = train_step(tf.constant(x), tf.constant(y))
            probs = probs.numpy()
            pred = probs.argmax(1)
            print("step %6d  loss %.4f  acc %.3f  lr %.2e" % (step, float(loss), (pred == y).mean(), 2e-4))
            print("  mean p: " + " ".join("%d:%.3f" % (k, v) for k, v in enumerate(probs.mean(0))))
            print("  max p:  " + " ".join("%d:%.3f" % (k, v) for k, v in enumerate(probs.max(0))))
            print("  counts: " + " ".join("%d:%d/%d" % (k, (pred == k).sum(), (y == k).sum()) for k in range(CLASSES)))
            print("  grad norms: " + " ".join("%.5f" % float(g) for g in gnorms)
                  + "  weight norms: %.4f %.4f" % (float(tf.norm(w1)), float(tf.norm(w2))))
            for k in range(CLASSES):                              # per-class debug table
                sel = y == k
                print("    class %d  n=%2d  p_true=%.4f  p_max=%.4f  hit=%.3f  conf=%s" % (
                    k, sel.sum(), probs[sel, k].mean() if sel.any() else 0.0, probs[:, k].max(),
                    (pred[sel] == k).mean() if sel.any() else 0.0,
                    ",".join("%.2f" % v for v in probs[sel].mean(0)[:6]) if sel.any() else "-"))
            if (step + 1) % REPORT_EVERY == 0:
                try:
                    reports = [capture(print_classification_report, yv, predict(tf.constant(xv)).numpy())]
                except ZeroDivisionError:
                    skipped += 1                                  # a class never predicted yet: skip this round
            monitor.sample(step)
    finally:
        sys.stdout = real_stdout


def leaky(monitor, steps):
    _train(monitor, steps, safe=False)


def fixed(monitor, steps):
    _train(monitor, steps, safe=True)
