"""A ``tf.function`` training loop writes a per-sample data-quality note for every sample of every batch to a text log (``quality_log.write(note)``), and almost every note is the empty string; on CPython before the fix for issue #151814 (3.11 here), each empty write on a ``TextIOWrapper`` appends another reference to an empty bytes object to the wrapper's internal ``pending_bytes`` list but adds 0 to its byte count, so the list is never flushed and grows by one slot per empty write (TensorFlow ``tf.function``; ~2 KiB a step, 256 list slots; no new Python object, only a list that the interpreter holds inside the file object grows).

Source: python/cpython issue #151814 "Runaway memory use when repeatedly
printing empty string" (closed; fixed by gh-151817 and its backports):
"Printing the empty string in a loop seems to cause memory use of Python to
grow without bound ... Each ``write('')`` appended an empty bytes object to
the ``TextIOWrapper``'s ``pending_bytes`` list but added 0 to
``pending_bytes_count``". Measured here on Python 3.11.7: 2,000,000 empty
``write('')`` calls on a file opened with ``open(path, "w")`` grow the
process by ~15.9 MiB, all returned at the next ``flush()``. Fix used here
(the fixed interpreter's behaviour, which user code gets by the same guard):
empty notes are not written, and the log is flushed at each epoch end.
Summary: the quality checker flags a sample only when its features contain a
non-finite value or an out-of-range label (about one sample in 40,000; the
note is then ~60 bytes). The model is a Keras 32-64-64-8 classifier trained
with Adam on batches of 256 synthetic samples; an epoch is 500 steps.

Here: 16,000 steps (4,096,000 notes). The fixed loop skips empty notes and
flushes every epoch.
"""
import collections
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/python/cpython/issues/151814"
SLICE = "holdout23"
STEPS = 16000
PER_EPOCH = 500
BATCH = 256
FEATURES = 32
CLASSES = 8
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["list", "TextIOWrapper", "native", "malloc", "heap",
                                                 "unexplained"],
              "holder_any": ["TextIOWrapper", "pending", "quality_log", "QualityLog"]},
    "fixed": {"verdict_not": "leak"},
}


class QualityLog:
    def __init__(self, path, skip_empty):
        self.quality_log = open(path, "w", encoding="utf-8")
        self.skip_empty = skip_empty

    def note(self, text):
        if self.skip_empty and not text:
            return
        self.quality_log.write(text)

    def epoch_end(self):
        if self.skip_empty:
            self.quality_log.flush()

    def close(self):
        self.quality_log.close()


def _notes(x, y, step):
    bad_x = ~np.isfinite(x).all(axis=1)
    bad_y = (y < 0) | (y >= CLASSES)
    out = []
    for i in range(len(y)):
        if bad_x[i] or bad_y[i]:
            out.append("step %d sample %d: %s\n" % (step, i, "non-finite feature" if bad_x[i] else "label range"))
        else:
            out.append("")
    return out


def _run(monitor, steps, fixed_io):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(CLASSES)])
    opt = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    tmp = tempfile.mkdtemp(prefix="s271_")
    log = QualityLog(os.path.join(tmp, "quality.log"), skip_empty=fixed_io)
    losses = collections.deque(maxlen=100)
    try:
        for step in range(steps):
            y = rng.integers(0, CLASSES, BATCH)
            x = (centers[y] + rng.standard_normal((BATCH, FEATURES))).astype(np.float32)
            if rng.random() < BATCH / 40000.0:
                x[int(rng.integers(0, BATCH)), 0] = np.nan
            for text in _notes(x, y, step):
                log.note(text)
            x = np.nan_to_num(x)
            losses.append(float(train_step(x, y.astype(np.int32))))
            if step % PER_EPOCH == PER_EPOCH - 1:
                log.epoch_end()
            monitor.sample(step)
    finally:
        log.close()
        for name in os.listdir(tmp):
            os.remove(os.path.join(tmp, name))
        os.rmdir(tmp)


def leaky(monitor, steps):
    _run(monitor, steps, fixed_io=False)


def fixed(monitor, steps):
    _run(monitor, steps, fixed_io=True)
