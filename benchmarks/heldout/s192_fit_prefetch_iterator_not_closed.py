"""A ``PyDataset`` serves ``model.fit`` from a background-thread prefetch iterator over an endless, reshuffled stream of the current shard, and at every epoch end builds a new prefetch iterator for the next shard without closing the old one; the old iterator's worker thread is blocked putting into its full prefetch buffer, so it never exits, and it keeps its buffer of batches and its shuffled copy of the shard alive: one more stuck thread and ~400 KiB an epoch (``model.fit`` on a ``PyDataset`` + ``LeakCallback``; grows once an epoch).

Source: google/grain issue #1021 "Memory leak with grain.experimental.device_put
and ThreadPrefetchIterDataset": "When the iterator
(ThreadPrefetchDatasetIterator) is not explicitly .close()d, its worker
thread never exits and continues consuming memory. If new iterators are
repeatedly created in a loop (e.g., re-creating a validation iterator
every N training steps), memory usage grows without bound." Fix used here
(the issue's): the dataset closes the previous iterator (stop flag, drain
the buffer, join the worker) before it builds the next one.
Summary: a 64-128-10 Keras classifier on eight 1,280-row shards of
Gaussian clusters, batch 32, 40 batches an epoch, one shard an epoch in
rotation; the prefetch buffer holds 8 batches.

Here: 100 epochs (4,000 batches). The fixed twin closes each iterator.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; a stub callback in place of
``LeakCallback``): leaky 576.3 / 585.8 / 593.2 / 600.4 / 607.5 MiB RSS at
20 / 40 / 60 / 80 % / end (~390 KiB an epoch: one stuck worker with its
shuffled shard and 8 buffered batches) with gc objects 328,178 / 329,172 /
330,274 / 331,293 / 332,302 (~50 an epoch), 7.5 s for 4,000 batches (~1.8
ms a batch); fixed 568.4 / 568.7 / 569.2 / 569.2 / 569.2 MiB with objects
327,170 -> 327,172, 7.5 s.
"""
import os
import queue
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/google/grain/issues/1021"
SLICE = "holdout16"
STEPS = 4000           # batches; 40 per epoch, 100 epochs
ROWS = 1280
BATCH = 32
FEATURES = 64
CLASSES = 10
SHARDS = 8
PREFETCH = 8
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Thread", "ndarray", "ThreadPrefetchIterator", "Queue", "deque"],
              "holder_any": ["_active", "Thread", "ThreadPrefetchIterator", "_target", "queue"]},
    "fixed": {"verdict_not": "leak"},
}


class ThreadPrefetchIterator:
    """Reads ahead from ``source`` on a worker thread into a bounded buffer."""

    def __init__(self, source, buffer_size):
        self._buffer = queue.Queue(maxsize=buffer_size)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, args=(source,), daemon=True, name="prefetch")
        self._thread.start()

    def _work(self, source):
        for item in source:
            while not self._stop.is_set():
                try:
                    self._buffer.put(item, timeout=0.5)          # blocks while the buffer is full
                    break
                except queue.Full:
                    continue
            if self._stop.is_set():
                return

    def __next__(self):
        return self._buffer.get()

    def close(self):
        self._stop.set()
        while True:                                                # drain so a blocked put returns
            try:
                self._buffer.get_nowait()
            except queue.Empty:
                break
        self._thread.join(timeout=5)


def _endless_shard(x, y, seed):
    rng = np.random.default_rng(seed)
    while True:                                                    # reshuffled passes over one shard
        perm = rng.permutation(len(x))
        xs, ys = x[perm], y[perm]
        for i in range(0, len(xs) - BATCH + 1, BATCH):
            yield xs[i:i + BATCH], ys[i:i + BATCH]


class ShardRotation(keras.utils.PyDataset):
    def __init__(self, shards, close_old, **kwargs):
        super().__init__(**kwargs)
        self.shards = shards
        self.close_old = close_old
        self.epoch = 0
        self._it = self._make_iterator()

    def _make_iterator(self):
        x, y = self.shards[self.epoch % len(self.shards)]
        return ThreadPrefetchIterator(_endless_shard(x, y, self.epoch), PREFETCH)

    def __len__(self):
        return ROWS // BATCH

    def __getitem__(self, idx):
        return next(self._it)

    def on_epoch_end(self):
        if self.close_old:
            self._it.close()                                       # the fix
        self.epoch += 1
        self._it = self._make_iterator()                           # the leak: the old one is still running


def _fit(logdir, steps, close_old):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    shards = []
    for _ in range(SHARDS):
        y = rng.integers(0, CLASSES, ROWS).astype(np.int32)
        shards.append((centers[y] + rng.standard_normal((ROWS, FEATURES), dtype=np.float32), y))
    data = ShardRotation(shards, close_old)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    try:
        model.fit(data, epochs=max(1, steps // (ROWS // BATCH)), verbose=0,
                  callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])
    finally:
        data._it.close()


def leaky_fit(logdir, steps):
    _fit(logdir, steps, close_old=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, close_old=True)
