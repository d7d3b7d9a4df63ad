"""A ``PyDataset`` reads its batches through an Airbyte-concurrent-CDK-style reader: every partition read is submitted to a thread pool and its ``Future`` appended to ``self._futures``, which the reader scans before each submit to keep at most four reads pending; nothing ever drops a finished future, so the list keeps every future and, through it, every decoded batch it returned, and the scan gets longer as it grows (``model.fit`` on a ``PyDataset`` + ``LeakCallback``; grows every batch, ~14 KiB of numpy arrays a batch, with a step time that grows).

Source: airbytehq/airbyte pull request #32277 "[ISSUE #32070] concurrent
cdk improve futures handling": "Pruning the list of futures if the length
of futures is bigger than the limit." Issue #32070 ("Concurrent CDK:
Reduce processing time and fix memory leak"): "we spend a lot of time in
the main thread in ``_wait_while_too_many_pending_futures``. The fact that
we are accumulating futures is prone to memory leak. We should handle our
futures better. ... only once the max_concurrent_tasks is reached, split
the 'waiting to complete' futures in three list: pending, exceptions,
done ... Else ``pending`` is the new ``waiting to complete`` and we discard
the ``done``". Fix used here (the PR's): once the list is longer than the
limit (64), finished futures are dropped (a finished future that failed
raises).
Summary: records of 48 features in 3 classes decoded from synthetic
partitions (64 rows of float32, a read of ~1 ms on a 2-thread pool, the
next two partitions read ahead; the partitions are a stream, read in
order); a 48-96-3 Keras classifier is trained with
``model.fit`` (50 batches an epoch).

Here: 4,000 batches (80 epochs). The fixed reader prunes finished futures
past 64 (the list saw-tooths between 4 and 64).

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a stub callback in place of
``LeakCallback``; RSS and object counts from separate runs): leaky 575.2 /
587.2 / 598.7 / 609.7 / 620.6 MiB RSS at 20 / 40 / 60 / 80 % / end (~14
KiB a batch: a finished ``Future`` with its lock, condition and the 12 KiB
batch it returned, in ``ConcurrentReader._futures``) with gc objects
335,831 / 344,631 / 353,432 / 362,232 / 371,033 at the same marks (11 a
batch), 27.0 s for 4,000 batches (~6.8 ms a batch on average, the pending
scan growing with the list); fixed 566.0 / 566.5 / 566.7 / 567.0 / 567.0
MiB with objects 327,350 / 327,648 / 327,207 / 327,494 / 327,099 (the
saw-tooth of the pruned list), 13.9 s (~3.5 ms a batch); a fixed run of
8,000 batches rose 1.1 MiB over its first 40 % and then held (567.0 ->
567.2 MiB), Keras's own settling.
"""
import concurrent.futures
import os
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/airbytehq/airbyte/pull/32277"
SLICE = "holdout18"
STEPS = 4000            # batches; 50 per epoch, 80 epochs
PER_EPOCH = 50
BATCH = 64
FEATURES = 48
CLASSES = 3
MAX_PENDING = 4
PRUNE_LIMIT = 64
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Future", "ndarray", "numpy", "list", "tuple"],
              "holder_any": ["_futures", "ConcurrentReader", "reader"]},
    "fixed": {"verdict_not": "leak"},
}


class ConcurrentReader:
    """Submits partition reads to a pool; tracks the futures to throttle them."""

    def __init__(self, read_fn, prune):
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="partition-reader")
        self._read_fn = read_fn
        self._prune = prune
        self._futures = []
        self._lock = threading.Lock()

    def _wait_while_too_many_pending_futures(self):
        while sum(1 for f in self._futures if not f.done()) >= MAX_PENDING:   # scans the whole list
            time.sleep(0.0002)

    def _prune_futures(self):
        if len(self._futures) <= PRUNE_LIMIT:
            return
        with self._lock:                                     # the fix (airbyte#32277)
            kept = []
            for f in self._futures:
                if f.done():
                    if f.exception() is not None:
                        raise f.exception()
                else:
                    kept.append(f)
            self._futures = kept

    def submit(self, partition):
        self._wait_while_too_many_pending_futures()
        if self._prune:
            self._prune_futures()
        future = self._pool.submit(self._read_fn, partition)
        self._futures.append(future)
        return future

    def close(self):
        self._pool.shutdown(wait=True)


class Partitions(keras.utils.PyDataset):
    def __init__(self, prune, **kwargs):
        super().__init__(**kwargs)
        rng = np.random.default_rng(0)
        self.centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
        self.reader = ConcurrentReader(self._read_partition, prune)
        self.cursor = 0                                      # partitions are a stream, read in order
        self._inflight = {}

    def __len__(self):
        return PER_EPOCH

    def _read_partition(self, partition):
        rng = np.random.default_rng(partition)
        y = rng.integers(0, CLASSES, BATCH)
        raw = self.centers[y] + 1.2 * rng.standard_normal((BATCH, FEATURES)).astype(np.float32)
        time.sleep(0.001)                                    # the read itself
        return np.ascontiguousarray(raw, dtype=np.float32), y.astype(np.int32)

    def __getitem__(self, idx):
        base = self.cursor
        self.cursor += 1
        for p in range(base, base + 3):                      # this partition and two ahead
            if p not in self._inflight:
                self._inflight[p] = self.reader.submit(p)
        return self._inflight.pop(base).result()


def _fit(logdir, steps, prune):
    keras.utils.set_random_seed(0)
    data = Partitions(prune)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(96, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    try:
        model.fit(data, epochs=max(1, steps // PER_EPOCH), verbose=0,
                  callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])
    finally:
        data.reader.close()


def leaky_fit(logdir, steps):
    _fit(logdir, steps, prune=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, prune=True)
