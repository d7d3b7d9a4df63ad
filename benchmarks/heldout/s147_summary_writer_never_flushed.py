"""Once the learning-rate warm-up ends (at 35 % of the run), an eager loop logs every layer's weight histogram each step to a ``tf.summary`` file writer created with a huge ``max_queue`` and a day-long ``flush_millis`` ("so the event file on the network mount is not rewritten all the time"); the writer's C++ queue keeps every serialized event until it is flushed, which now only happens at ``close()``, so native memory grows by each step's events while no Python object grows (eager loop; late onset, native memory only).

Source: lanpa/tensorboardX#116 "Summaries don't flush to disk" ("The
size on disk doesn't change unless I kill the python process ... although
RAM is still expanding ... until it crashes"; the summaries stayed queued
in the writer) and tensorflow/tensorflow#8265 "Memory leak when writing
to Logfile with Tensorboard summarywriter" (half of the growth "occupied
by the ``add_summary`` function of Filewriter"). Fix used here: the
writer's defaults (``max_queue=10``, ``flush_millis=120000``) plus an
explicit ``writer.flush()`` every 200 steps, so the queue never holds
more than a few steps' events.
Summary: a 3-layer MLP is trained with a ``GradientTape`` loop; after
warm-up the loop writes ``tf.summary.histogram`` for each of its six
weight and bias tensors and a loss scalar every step.

Here: batches of 64 x 64 float32, a 64-128-64-10 MLP, seven summaries a
step from the onset on. The fixed twin's writer uses the default queue
and is flushed every 200 steps.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; a do-nothing ``monitor.sample``): leaky
543.6 / 563.4 / 574.2 / 585.2 / 595.5 MiB RSS at 20 / 40 / 60 / 80 % /
end (flat until the onset, then ~12 KiB a step) with gc objects flat
after the onset's one-off summary set-up (313,774 / 328,799 / 328,799 /
328,800 / 328,801), 42.8 s for 4,500 steps; fixed 543.8 / 561.4 /
562.2 / 562.7 / 563.5 MiB (the same one-off jump at the onset, then
~0.3 KiB a step as the allocator settles), objects the same, 45.7 s.

Corrected after two runs of holdout12 (the slice is opened): the first
version advanced the summary step with ``step_var.assign(step)``, and its
fixed twin's C heap (glibc ``mallinfo2``, no tb-leak) grew ~0.6 KiB a
step for as long as it ran (96.3 -> 104.5 MB over 13,000 steps after
the onset; with no summaries written, flat; with only the ``assign``,
the same ~0.62 KiB a step): TensorFlow's eager scalar cache keeping each
step's Python int, a second leak in both twins, which tb-leak reported
as a leak of the fixed twin. Both twins now advance the step with
``assign_add(1)``.
"""
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/lanpa/tensorboardX/issues/116"
SLICE = "holdout12"
STEPS = 4500
ONSET = 0.35
BATCH = 64
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "summary", "writer"]},
    "fixed": {"verdict_not": "leak"},
}


def _train(monitor, steps, never_flush):
    logdir = tempfile.mkdtemp(prefix="hist-")
    if never_flush:                                           # the leak: events stay queued until close()
        writer = tf.summary.create_file_writer(logdir, max_queue=10 ** 7, flush_millis=24 * 3600 * 1000)
    else:                                                     # the fix: default queue, periodic flush
        writer = tf.summary.create_file_writer(logdir)
    rng = np.random.default_rng(0)
    sizes = [64, 128, 64, 10]
    params = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        params += [tf.Variable((rng.normal(size=(a, b)) / np.sqrt(a)).astype(np.float32)),
                   tf.Variable(np.zeros(b, np.float32))]
    centers = rng.normal(size=(10, 64)).astype(np.float32)
    opt = tf.keras.optimizers.SGD(0.05)
    onset = int(steps * ONSET)
    # A tensor step advanced by one: assigning each step's Python int
    # (step_var.assign(step)) converts a new scalar every step, which TF's
    # eager scalar cache keeps (~0.6 KiB of C heap a step, measured below).
    step_var = tf.Variable(onset - 1, dtype=tf.int64)
    with writer.as_default():
        for step in range(steps):
            y = rng.integers(0, 10, BATCH)
            x = tf.constant(centers[y] + rng.standard_normal((BATCH, 64), dtype=np.float32))
            with tf.GradientTape() as tape:
                h = x
                for i in range(0, len(params), 2):
                    h = tf.matmul(h, params[i]) + params[i + 1]
                    if i + 2 < len(params):
                        h = tf.nn.relu(h)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, h))
            opt.apply_gradients(zip(tape.gradient(loss, params), params))
            if step >= onset:
                step_var.assign_add(1)
                for i, p in enumerate(params):
                    tf.summary.histogram("param_%d" % i, p, step=step_var)
                tf.summary.scalar("loss", loss, step=step_var)
                if not never_flush and step % 200 == 0:
                    writer.flush()
            monitor.sample(step)
    writer.close()


def leaky(monitor, steps):
    _train(monitor, steps, never_flush=True)


def fixed(monitor, steps):
    _train(monitor, steps, never_flush=False)
