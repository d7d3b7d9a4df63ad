"""An eager training loop hands each batch's predictions to a fresh short-lived thread that updates a shared ``keras.metrics.AUC`` "so scoring never blocks the step"; every new thread that runs eager TensorFlow ops leaves per-thread state behind in TensorFlow's runtime (an empty Python list held from C++ and a few hundred bytes of native memory), so memory creeps up by one thread's worth a batch (eager loop; small, slow leak).

Source: tensorflow/tensorflow#35044 "Memory leaks when using
tf.keras.metrics update_states in multi-threads" ("The memory increases
and does not release when I use ``tf.keras.metrics.update_states`` in
multi-threads ... find that the memory increase after each thread
starts"), reported from sql-machine-learning/elasticdl#1568, where a
gRPC server updated metrics from whichever thread received each
evaluation report ("The memory leak is very obvious when we set
``futures.ThreadPoolExecutor(max_workers=64)`` and disappears if
``futures.ThreadPoolExecutor(max_workers=1)``"). Fix used here (the
thread's): one long-lived scoring worker (a single-thread executor), so
no new thread ever touches TensorFlow.
Summary: a binary classifier is trained with a ``GradientTape`` loop;
after each step the batch's labels and probabilities go to
``threading.Thread(target=auc.update_state, ...)``, started and joined
before the next step's scoring.

Here: batches of 128 x 24 float32, a 24-32-1 MLP; one thread a step. The
fixed twin submits the same update to a one-worker
``ThreadPoolExecutor``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; a do-nothing ``monitor.sample``): leaky
546.3 / 549.2 / 549.7 / 550.2 / 548.0 MiB RSS at 20 / 40 / 60 / 80 % /
end (noisy: thread stacks and malloc arenas come and go; net +1.7 MiB)
with gc objects rising by one a thread, 317,257 / 319,658 / 322,058 /
324,458 / 326,888 (an empty list that no Python object refers to),
45.8 s for 12,000 steps (~3.8 ms a step); fixed 545.7 / 548.1 / 548.1 /
548.1 / 548.1 MiB with objects flat (314,931 -> 314,952), 45.8 s.
"""
import concurrent.futures
import os
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/tensorflow/tensorflow/issues/35044"
SLICE = "holdout12"
STEPS = 12000
BATCH = 128
FEATURES = 24
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["list", "native", "rss", "Thread"]},
    "fixed": {"verdict_not": "leak"},
}


def _train(monitor, steps, one_worker):
    rng = np.random.default_rng(0)
    w_true = rng.normal(size=(FEATURES,)).astype(np.float32)
    w1 = tf.Variable(rng.normal(size=(FEATURES, 32)).astype(np.float32) * 0.2)
    w2 = tf.Variable(np.zeros((32, 1), np.float32))
    opt = keras.optimizers.SGD(0.05)
    auc = keras.metrics.AUC(num_thresholds=50)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1) if one_worker else None
    pending = None
    for step in range(steps):
        xb = rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
        yb = (xb @ w_true > 0).astype(np.float32)[:, None]
        x = tf.constant(xb)
        with tf.GradientTape() as tape:
            logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(yb, logits))
        opt.apply_gradients(zip(tape.gradient(loss, [w1, w2]), [w1, w2]))
        probs = tf.sigmoid(logits).numpy()
        if pending is not None:
            pending.join() if isinstance(pending, threading.Thread) else pending.result()
        if one_worker:
            pending = pool.submit(auc.update_state, yb, probs)          # the fix: one long-lived worker
        else:
            pending = threading.Thread(target=auc.update_state, args=(yb, probs))   # the leak: a thread a batch
            pending.start()
        if step % 1000 == 999:
            auc.reset_state()
        monitor.sample(step)
    if pending is not None:
        pending.join() if isinstance(pending, threading.Thread) else pending.result()
    if pool is not None:
        pool.shutdown()


def leaky(monitor, steps):
    _train(monitor, steps, one_worker=False)


def fixed(monitor, steps):
    _train(monitor, steps, one_worker=True)
