"""The TensorFlow profiler started after warm-up and left running until training ends (eager).

Source: openxla/xprof#289 "python_tracer_level=1 causes OOM very quickly"
(profiling an eager TensorFlow program: "The memory usage basically grows
linearly with time"; the profiler holds its trace until it is stopped) and
tensorflow/tensorboard#3288 "Profiler for custom training loop is too slow
and could even be killed" (profiling a whole custom training loop). Fix
from TensorFlow's profiler guide: profile a short window of steps, after
warm-up, and stop the profiler (``tf.profiler.experimental.start`` /
``stop`` around ~20 steps), which writes the trace and frees it.
Summary: a custom eager loop turns the profiler on once the first few
hundred (warm-up) steps are done, meaning to look at steady-state steps, and
stops it only when training ends; every op executed in between is recorded
in host memory.

Here: an eager GradientTape step of a 64-128-10 MLP on batches of 128
(a dozen ops a step); the profiler starts at 20 % of the run. The leak is
native memory (trace events), no Python object grows; it starts after the
warm-up. The fixed twin profiles steps 20 %..20 %+20 and stops: a short
bump, written out and freed.

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +83.9 MiB RSS from 20 % of the run to the end (all after
the warm-up, ~36 KiB per step), fixed +0.3 MiB; ~5-7 ms a step (2 shared
cores).
"""
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/openxla/xprof/issues/289"
SLICE = "holdout4"
STEPS = 3000
PROFILE_FROM = 0.2
PROFILE_STEPS = 20
EXPECT = {
    # No Python object grows: the profiler's trace buffers do.
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "malloc"]},
    "fixed": {"verdict_not": "leak"},
}


def _train(monitor, steps, window):
    rng = np.random.default_rng(0)
    init = tf.random.stateless_normal
    w1 = tf.Variable(init((64, 128), seed=(3, 1), stddev=0.1))
    w2 = tf.Variable(init((128, 10), seed=(3, 2), stddev=0.1))
    centers = rng.standard_normal((10, 64)).astype(np.float32)
    logdir = tempfile.mkdtemp(prefix="tb-leak-s51-profile-")
    start = int(PROFILE_FROM * steps)
    stop = start + PROFILE_STEPS if window else None
    profiling = False
    try:
        for step in range(steps):
            if step == start:
                tf.profiler.experimental.start(logdir)
                profiling = True
            y = rng.integers(0, 10, size=128).astype(np.int32)
            x = tf.constant(centers[y] + rng.standard_normal((128, 64), dtype=np.float32))
            with tf.GradientTape() as tape:
                logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            for v, g in zip([w1, w2], tape.gradient(loss, [w1, w2])):
                v.assign_sub(0.05 * g)
            if profiling and step + 1 == stop:
                tf.profiler.experimental.stop()
                profiling = False
            monitor.sample(step)
    finally:
        if profiling:
            tf.profiler.experimental.stop(save=False)     # the leaky loop stops only when training ends
        shutil.rmtree(logdir, ignore_errors=True)


def leaky(monitor, steps):
    _train(monitor, steps, window=False)


def fixed(monitor, steps):
    _train(monitor, steps, window=True)
