"""A ``tf.function`` training loop runs a small audit task after every step (label balance, loss spike and gradient-norm checks on the batch) and, like a task executor, gives each task its own log file with a structlog-style ``BytesLogger``, closes the file and ships it; the logging library is written like structlog before 26.1.0, whose ``_get_lock_for_file`` stores a lock for every file object in the module-level ``WRITE_LOCKS`` dict keyed by the file itself, so every task's (closed) file object and its lock stay referenced for the rest of the run (tf.function; grows every step, small: ~0.65 KiB a step).

Source: hynek/structlog pull request #807 "Use WeakKeyDictionary for
WRITE_LOCKS to prevent file object leaks" (merged; released in structlog
26.1.0): "File objects registered in WRITE_LOCKS were never released,
causing a memory leak in long-running processes that open many log files
(e.g., task executors creating a per-task BytesLogger or WriteLogger).
WeakKeyDictionary stores keys as weak references, so entries expire
automatically when the last strong reference to a file object is dropped
— no manual cleanup needed." (It closed pull request #806, opened after
apache/airflow traced a task-executor leak with memray: "structlog's
WRITE_LOCKS holds references to file descriptors created by the process,
and these references prevent the associated loggers from being garbage
collected even after they are no longer in use".) Fix used here (the
PR's): ``WRITE_LOCKS`` is a ``weakref.WeakKeyDictionary``.
Summary: a ``tf.function`` Adam step of a 16-48-48-3 MLP on batches of 32
synthetic rows, returning the loss and the gradients' global norm; after
each step an audit task opens ``audit/task-NNNNNN.log`` in ``ab`` mode,
wraps it in a ``BytesLogger`` (the stand-in's ``_output`` module has
structlog's ``WRITE_LOCKS`` and ``_get_lock_for_file``), logs three JSON
events (task start, the checks' results, task end), closes the file,
"ships" it (reads its size and deletes it). The stand-in keeps structlog's
API shape; structlog itself is not installed here.

Here: 20,000 steps. The fixed module's ``WRITE_LOCKS`` is a
``WeakKeyDictionary``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS
read before each object count, at the marks only): leaky 565.1 / 567.7 /
570.0 / 573.0 / 575.3 MiB RSS at 20 / 40 / 60 / 80 % / end (558.3 MiB at
the first step; ~0.65 KiB a step: each task's closed ``BufferedWriter`` and
``FileIO`` with the name string, its lock and the dict slot) with gc
objects 325,149 at the first step, then 337,156 / 349,156 / 361,023 /
373,023 / 385,023 at the same marks (3 a step), 16.0 s for 20,000 steps
(~0.8 ms a step); fixed 561.6 / 561.9 / 561.9 / 561.9 / 561.9 MiB with
objects 325,166 / 325,167 / 325,168 / 325,169 / 325,170, 14.7 s. 18-20 s a
variant in its process, imports included.
"""
import json
import os
import shutil
import tempfile
import threading
import time
import weakref

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/hynek/structlog/pull/807"
SLICE = "holdout20"
STEPS = 20000
BATCH = 32
FEATURES = 16
CLASSES = 3
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["BufferedWriter", "FileIO", "lock", "TextIOWrapper"],
              "holder_any": ["WRITE_LOCKS", "_output"]},
    "fixed": {"verdict_not": "leak"},
}


class _Output:
    """structlog._output, reduced to what BytesLogger needs."""

    def __init__(self, weak_keys):
        self.WRITE_LOCKS = weakref.WeakKeyDictionary() if weak_keys else {}   # the fix (structlog#807)

    def _get_lock_for_file(self, file):
        lock = self.WRITE_LOCKS.get(file)
        if lock is None:
            lock = threading.Lock()
            self.WRITE_LOCKS[file] = lock
        return lock


class BytesLogger:
    def __init__(self, output, file):
        self._file = file
        self._write = file.write
        self._flush = file.flush
        self._lock = output._get_lock_for_file(file)

    def msg(self, message):
        with self._lock:
            self._write(message + b"\n")
            self._flush()


class BoundLogger:
    def __init__(self, logger, **context):
        self._logger = logger
        self._context = context

    def info(self, event, **kw):
        record = dict(self._context, event=event, level="info", timestamp=round(time.time(), 6), **kw)
        self._logger.msg(json.dumps(record, separators=(",", ":")).encode())


def _train(monitor, steps, weak_keys):
    keras.utils.set_random_seed(0)
    output = _Output(weak_keys)
    tmp = tempfile.mkdtemp(prefix="s237_")
    audit_dir = os.path.join(tmp, "audit")
    os.makedirs(audit_dir)
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal((FEATURES, CLASSES)).astype(np.float32)
    x_pool = rng.standard_normal((4096, FEATURES)).astype(np.float32)
    y_pool = np.argmax(x_pool @ w_true, axis=1).astype(np.int32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(48, activation="relu"),
                              keras.layers.Dense(48, activation="relu"), keras.layers.Dense(CLASSES)])
    opt = keras.optimizers.Adam(1e-3)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss, tf.linalg.global_norm(grads)

    shipped = 0
    last_loss = None
    try:
        for step in range(steps):
            i = (step * BATCH) % 4096
            loss, grad_norm = train_step(x_pool[i:i + BATCH], y_pool[i:i + BATCH])
            loss_value = float(loss)
            grad_norm = float(grad_norm)
            counts = np.bincount(y_pool[i:i + BATCH], minlength=CLASSES)
            path = os.path.join(audit_dir, f"task-{step:06d}.log")
            fd = open(path, "ab")
            log = BoundLogger(BytesLogger(output, fd), task=f"audit-{step:06d}", step=step)
            log.info("task_started")
            log.info("checks", class_counts=counts.tolist(), grad_norm=round(grad_norm, 5),
                     loss_spike=bool(last_loss is not None and loss_value > 2.0 * last_loss))
            log.info("task_finished", loss=round(loss_value, 5))
            fd.close()
            shipped += os.path.getsize(path)                 # "ship" the task log, then drop it
            os.remove(path)
            last_loss = loss_value
            monitor.sample(step)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def leaky(monitor, steps):
    _train(monitor, steps, weak_keys=False)


def fixed(monitor, steps):
    _train(monitor, steps, weak_keys=True)
