"""A loader arms a 10-minute watchdog timer for every batch request and cancels it when the batch arrives, but cancelling only marks the handle, which stays in the timer heap, with the request and its batch, until its deadline (eager loop with a ``tf.function`` step).

Source: socketry/io-event#180 "Prevent unbounded PriorityHeap growth of
cancelled timers" ("``cancel!`` just sets ``@block`` to ``nil`` without
removing it from the ``PriorityHeap``. It will eventually be pruned when
it reaches the top of the heap, but that could take arbitrarily long";
the reproducer wraps 500,000 short tasks in ``with_timeout(100)`` and the
heap size climbs). The same design once leaked in Python's asyncio
(ArchiveTeam/wpull#166 "TimerHandle objects are leaked", with 38,068 live
``TimerHandle``s; python/asyncio#186 "Clear references in
Handle.cancel()"). Fixes, both used here: ``cancel()`` drops the
callback and its arguments (asyncio#186), and the heap is compacted when
more than half of it is cancelled (asyncio's
``_MIN_CANCELLED_TIMER_HANDLES_FRACTION``; io-event#180 removes the entry
at once instead).
Summary: a prefetching loader guards every batch request with
``timers.call_later(600, on_timeout, request)`` so a stuck reader is
reported, and calls ``handle.cancel()`` when the batch is ready. The
trainer's ``TimerHeap`` only pops entries whose deadline has passed, and
no deadline passes during the run, so the heap keeps every cancelled
handle, each holding its ``BatchRequest`` with the decoded feature and
label tensors.

Here: batches of 16 x 64 float32 features, a 64-128-10 Keras MLP with a
``tf.function`` train step (~1-2 ms); the timer heap is polled every
step. The fixed twin clears the handle's callback and arguments on
``cancel()`` and rebuilds the heap without cancelled entries once they are
more than half of it (a saw-tooth of at most ~100 small handles).

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky +62.0
MiB RSS from 20 % of the run to the end (~6.6 KiB a step; +7.0 gc-tracked
objects a step: 339,381 / 356,138 / 406,389 objects at 20 % / 40 % / end),
fixed +1.7 MiB from 20 % to 40 % and +0.75 MiB after, objects flat
(322,517-322,529); ~1 ms a step (12 s for 12,000 steps).
"""
import heapq
import itertools
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/socketry/io-event/pull/180"
SLICE = "holdout8"
STEPS = 12000
TIMEOUT_S = 600.0
BATCH = 16
FEATURES = 64
CLASSES = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["TimerHandle", "BatchRequest", "EagerTensor", "Tensor", "tuple"],
              "holder_any": ["_heap", "TimerHeap", "timers"]},
    "fixed": {"verdict_not": "leak"},
}


class TimerHandle:
    __slots__ = ("when", "seq", "callback", "args", "cancelled", "heap")

    def __init__(self, when, seq, callback, args, heap):
        self.when, self.seq, self.callback, self.args, self.heap = when, seq, callback, args, heap
        self.cancelled = False

    def __lt__(self, other):
        return (self.when, self.seq) < (other.when, other.seq)

    def cancel(self):
        self.cancelled = True                          # the heap entry stays until its deadline
        self.heap.cancelled += 1
        if self.heap.clear_on_cancel:                  # the fix, part 1 (asyncio#186)
            self.callback = self.args = None


class TimerHeap:
    def __init__(self, compact):
        self._heap = []
        self._seq = itertools.count()
        self.cancelled = 0
        self.compact = compact
        self.clear_on_cancel = compact

    def call_later(self, delay, callback, *args):
        handle = TimerHandle(time.monotonic() + delay, next(self._seq), callback, args, self)
        heapq.heappush(self._heap, handle)
        return handle

    def run_due(self):
        now = time.monotonic()
        while self._heap and self._heap[0].when <= now:
            handle = heapq.heappop(self._heap)
            if handle.cancelled:
                self.cancelled -= 1
            else:
                handle.callback(*handle.args)
        if self.compact and self.cancelled > 50 and 2 * self.cancelled > len(self._heap):   # the fix, part 2
            self._heap = [h for h in self._heap if not h.cancelled]
            heapq.heapify(self._heap)
            self.cancelled = 0


class BatchRequest:
    def __init__(self, index):
        self.index = index
        self.features = None
        self.labels = None


def on_timeout(request):
    print("batch %d did not arrive within %.0f s" % (request.index, TIMEOUT_S))


def _train(monitor, steps, compact):
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
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    timers = TimerHeap(compact)
    for step in range(steps):
        request = BatchRequest(step)
        watchdog = timers.call_later(TIMEOUT_S, on_timeout, request)
        y = rng.integers(0, CLASSES, BATCH).astype(np.int32)
        request.features = tf.constant((centers[y] + rng.normal(size=(BATCH, FEATURES))).astype(np.float32))
        request.labels = tf.constant(y)
        watchdog.cancel()                              # the batch arrived in time
        train_step(request.features, request.labels)
        timers.run_due()
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, compact=False)


def fixed(monitor, steps):
    _train(monitor, steps, compact=True)
