"""An exception-replay debug hook snapshots the frame locals of every handled data error into a list, and the locals are batch tensors (eager ``GradientTape`` loop).

Source: DataDog/dd-trace-py#15586 "fix(er): eliminate infinite loop in
``unwind_exception_chain``" (exception replay captured snapshots of the
frames of every exception, "retaining frame objects in memory until
snapshots are sent"; among the fixes: "Switched from a dequeue with a max
length instead of a list"). Fix from the PR: keep the snapshots in a
``deque(maxlen=...)``.
Summary: a training script installs a small exception-replay hook to debug
bad batches: when ``check_batch`` raises, the loop skips the batch and the
hook records the raising frame's locals (the batch tensors, the logits) so
that they can be inspected later. About one batch in four trips the check
(a NaN in the features from an upstream bug), and every snapshot stays in
the hook's list.

Here: 64 x 128 float32 batches, a 128-256-10 Keras MLP trained eagerly
with ``GradientTape``. The fixed twin's ``deque(maxlen=50)`` is full after
~200 steps.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky +35 MiB RSS from 20 % of the run to the end of a 3,500-step run
(~12.8 KiB per step, +2 gc-tracked objects a step, steady), fixed +1.0 MiB
over the same span, most of it before the deque is full (+0.6 MiB from 40 %
to the end, gc objects flat); ~31 ms a step with another job running, so
STEPS was cut to 2,000 (well under 90 s).
"""
import collections
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/DataDog/dd-trace-py/pull/15586"
SLICE = "holdout6"
STEPS = 2000
BATCH = 64
FEATURES = 128
BAD_EVERY = 4
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EagerTensor", "Tensor", "dict", "ExceptionSnapshot"],
              "holder_any": ["snapshots", "ExceptionReplay"]},
    "fixed": {"verdict_not": "leak"},
}


class BadBatchError(ValueError):
    pass


class ExceptionSnapshot:
    def __init__(self, exc, frame_locals):
        self.type_name = type(exc).__name__
        self.message = str(exc)
        self.locals = frame_locals


class ExceptionReplay:
    def __init__(self, bounded):
        self.snapshots = collections.deque(maxlen=50) if bounded else []

    def capture(self, exc):
        tb = exc.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        self.snapshots.append(ExceptionSnapshot(exc, dict(tb.tb_frame.f_locals)))


def check_batch(x, y, logits):
    finite = tf.reduce_all(tf.math.is_finite(x))
    if not bool(finite):
        raise BadBatchError("non-finite features in batch of %d" % int(tf.shape(x)[0]))


def _train(monitor, steps, bounded):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(10)])
    opt = keras.optimizers.SGD(0.05)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    replay = ExceptionReplay(bounded)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((10, FEATURES)).astype(np.float32)
    for step in range(steps):
        yb = rng.integers(0, 10, BATCH)
        xb = centers[yb] + rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
        if step % BAD_EVERY == 1:
            xb[rng.integers(0, BATCH), rng.integers(0, FEATURES)] = np.nan
        x, y = tf.constant(xb), tf.constant(yb)
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        try:
            check_batch(x, y, logits)
        except BadBatchError as exc:
            replay.capture(exc)                  # keeps the raising frame's locals: x, y, logits
            del exc
        else:
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, bounded=False)


def fixed(monitor, steps):
    _train(monitor, steps, bounded=True)
