"""A Keras callback reports slow work the way sbt's super shell does, through a module-level ``TaskProgress`` singleton: every batch registers its tasks (waiting for data, the train step, the metrics flush) in ``activeTasksMap`` while they run and keeps their ``TaskTiming`` in ``timings`` so that the end-of-epoch report can list the slowest; the singleton lives for the whole process and nothing clears ``timings``, so it gains three timings a batch for as long as training runs (``model.fit`` + ``LeakCallback``; grows every batch, ~1.9 KiB a batch).

Source: sbt/sbt pull request #5692 "Clear singleton TaskProgress between
runs": "In db4878c78600f4c80cf81d97ea915c3d5fee17fe, TaskProgress became an
object which mostly made things easier to reason about. The one problem
was that it started leaking tasks with every run because the timings map
would accumulate tasks that weren't cleared. To fix this, we can clear the
timings and activeTasksMap in the TaskProgress object in the
afterAllCompleted callback." Fix used here (the PR's): both maps are
cleared in ``after_all_completed()``, called at the end of each epoch
(each "run" of tasks) once the report is written.
Summary: a 32-64-4 Keras classifier trained with ``model.fit`` on a
``PyDataset`` of synthetic rows (100 batches of 64 an epoch); the callback
opens and closes three tasks a batch, keyed by task objects named after
the epoch and batch, and reports the five slowest at each epoch end.

Here: 8,000 batches (80 epochs). The fixed callback clears the singleton
after each epoch's report (the maps saw-tooth between 0 and 300 entries).

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a stub callback in place of
``LeakCallback``; RSS and object counts from separate runs): leaky 566.0 /
568.9 / 571.8 / 574.7 / 578.0 MiB RSS at 20 / 40 / 60 / 80 % / end (~1.9
KiB a batch: three ``Task`` keys with their names and three ``TaskTiming``
records with their details dicts in ``TaskProgress.timings``) with gc
objects 339,861 / 352,661 / 365,506 / 378,306 / 391,106 at the same marks
(8 a batch), 24.8 s for 8,000 batches (~3.1 ms a batch, the epoch-end sort
growing with the map); fixed 563.5 / 563.6 / 563.6 / 563.7 / 563.7 MiB
with objects 327,857 at every mark (each mark falls on an epoch's last
batch, with 300 timings in the map), 18.2 s.
"""
import os
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/sbt/sbt/pull/5692"
SLICE = "holdout18"
STEPS = 8000            # batches; 100 per epoch, 80 epochs
PER_EPOCH = 100
BATCH = 64
FEATURES = 32
CLASSES = 4
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["TaskTiming", "Task", "dict", "str"],
              "holder_any": ["timings", "TaskProgress", "task_progress"]},
    "fixed": {"verdict_not": "leak"},
}


class Task:
    __slots__ = ("name", "scope", "__weakref__")

    def __init__(self, name, scope):
        self.name = name
        self.scope = scope


class TaskTiming:
    __slots__ = ("task", "start_ns", "end_ns", "thread", "details")

    def __init__(self, task, start_ns, thread):
        self.task = task
        self.start_ns = start_ns
        self.end_ns = None
        self.thread = thread
        self.details = {}


class _TaskProgress:
    """sbt's ``TaskProgress`` object: one per process."""

    def __init__(self):
        self.timings = {}
        self.activeTasksMap = {}

    def before_work(self, task):
        now = time.perf_counter_ns()
        self.activeTasksMap[task] = now
        self.timings[task] = TaskTiming(task, now, threading.current_thread().name)

    def after_work(self, task, **details):
        self.activeTasksMap.pop(task, None)
        timing = self.timings[task]
        timing.end_ns = time.perf_counter_ns()
        timing.details.update(details)

    def slowest(self, n):
        done = [t for t in self.timings.values() if t.end_ns is not None]
        return sorted(done, key=lambda t: t.end_ns - t.start_ns, reverse=True)[:n]

    def after_all_completed(self):
        self.timings.clear()                                 # the fix (sbt#5692)
        self.activeTasksMap.clear()


TaskProgress = _TaskProgress()


class ProgressReporter(keras.callbacks.Callback):
    def __init__(self, clear_after_run):
        super().__init__()
        self.clear_after_run = clear_after_run
        self.epoch = 0
        self.reports = []

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        self._step = Task("epoch %d / batch %d / train_step" % (self.epoch, batch), "fit")
        TaskProgress.before_work(self._step)

    def on_train_batch_end(self, batch, logs=None):
        TaskProgress.after_work(self._step, loss=float(logs["loss"]) if logs and "loss" in logs else None)
        flush = Task("epoch %d / batch %d / metrics_flush" % (self.epoch, batch), "callbacks")
        TaskProgress.before_work(flush)
        TaskProgress.after_work(flush, keys=sorted(logs or {}))

    def on_epoch_end(self, epoch, logs=None):
        slow = TaskProgress.slowest(5)
        self.reports.append([(t.task.name, (t.end_ns - t.start_ns) // 1000) for t in slow])
        self.reports = self.reports[-3:]
        if self.clear_after_run:
            TaskProgress.after_all_completed()


class Rows(keras.utils.PyDataset):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rng = np.random.default_rng(0)
        self.centers = self.rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
        self.epoch = 0

    def __len__(self):
        return PER_EPOCH

    def __getitem__(self, idx):
        task = Task("epoch %d / batch %d / data_wait" % (self.epoch, idx), "input")
        TaskProgress.before_work(task)
        y = self.rng.integers(0, CLASSES, BATCH)
        x = (self.centers[y] + self.rng.standard_normal((BATCH, FEATURES))).astype(np.float32)
        TaskProgress.after_work(task, rows=BATCH)
        return x, y.astype(np.int32)

    def on_epoch_end(self):
        self.epoch += 1


def _fit(logdir, steps, clear_after_run):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(Rows(), epochs=max(1, steps // PER_EPOCH), verbose=0,
              callbacks=[ProgressReporter(clear_after_run), tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, clear_after_run=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, clear_after_run=True)
