"""The training loop exports a per-batch loss histogram through a Prometheus-style client and labels it with the batch key and attempt, so every batch creates a new labelled child series that the registry keeps forever (eager loop with a ``tf.function`` step).

Source: chrisguidry/docket#164 "Fix memory leak in Prometheus metrics by
removing unbounded labels" ("metrics were using
``execution.specific_labels()`` which includes task keys, timestamps, and
attempt numbers. These create unbounded cardinality in Prometheus, causing
memory growth over time as each unique combination creates a new time
series. Changed these metrics to use ``execution.general_labels()``
instead, which only includes bounded labels"); the same report in
BerriAI/litellm#12159 ("labelled with high cardinality fields like user_id
and key_id ... many thousands of separate metrics that never get GC'ed").
Fix, docket's: label only with bounded values (phase and shard).
Summary: a classifier is trained on sharded data with a ``tf.function``
step, and the loop reports each batch's loss to a ``Histogram`` from a
small Prometheus-style client (a registry, metrics with label names,
``metric.labels(...)`` returning the child for a label tuple, created on
first use with its bucket counters and lock, as ``prometheus_client``
does). The labels include ``batch_key`` (epoch and batch index) and
``attempt``, so each batch gets its own child: ~3.5 KiB (14 bucket values
with their locks, a sum, a dict entry) that the metric keeps for the whole
run, while a scrape thread walks every child once a second.

Here: batches of 32 x 64 features from 16 shards, a 64-128-10 Keras MLP
with a ``tf.function`` train step (~2 ms a step). The fixed twin labels
with ``phase`` and ``shard`` only (16 children, all created in the first
few dozen steps).

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky +29.7
MiB RSS from 20 % of the run to the end (~3.8 KiB a step; 562.8 / 570.6 /
592.5 MiB at 20 % / 40 % / end) and +32 gc-tracked objects a step
(386,581 / 450,582 / 642,579), fixed 557.0 / 558.7 / 559.4 MiB with
objects flat (323,211 / 323,213 / 323,213); ~1.6-1.7 ms a step (16-17 s
for 10,000 steps, with another job on the machine).
"""
import os
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/chrisguidry/docket/pull/164"
SLICE = "holdout9"
STEPS = 10000
BATCHES_PER_EPOCH = 200
SHARDS = 16
BATCH = 32
FEATURES = 64
CLASSES = 10
BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, float("inf"))
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["HistogramChild", "MutexValue", "lock", "list", "dict", "tuple"],
              "holder_any": ["_metrics", "Histogram", "REGISTRY", "children"]},
    "fixed": {"verdict_not": "leak"},
}


class MutexValue:
    """A float guarded by a lock, as prometheus_client's ``MutexValue``."""

    def __init__(self):
        self._value = 0.0
        self._lock = threading.Lock()

    def inc(self, amount):
        with self._lock:
            self._value += amount

    def get(self):
        with self._lock:
            return self._value


class HistogramChild:
    def __init__(self, labelvalues):
        self.labelvalues = labelvalues
        self._buckets = [MutexValue() for _ in BUCKETS]
        self._sum = MutexValue()

    def observe(self, value):
        self._sum.inc(value)
        for bound, bucket in zip(BUCKETS, self._buckets):
            if value <= bound:
                bucket.inc(1.0)
                break


class Histogram:
    def __init__(self, name, labelnames, registry):
        self.name = name
        self._labelnames = tuple(labelnames)
        self._metrics = {}                     # label values -> child; never pruned
        self._lock = threading.Lock()
        registry.register(self)

    def labels(self, **labelvalues):
        key = tuple(str(labelvalues[n]) for n in self._labelnames)
        with self._lock:
            child = self._metrics.get(key)
            if child is None:
                child = self._metrics[key] = HistogramChild(key)
            return child

    def collect(self):
        with self._lock:
            children = list(self._metrics.values())
        return sum(c._sum.get() for c in children), len(children)


class CollectorRegistry:
    def __init__(self):
        self._collectors = []

    def register(self, metric):
        self._collectors.append(metric)

    def scrape(self):
        return [m.collect() for m in self._collectors]


def _train(monitor, steps, bounded_labels):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    registry = CollectorRegistry()
    labelnames = ("phase", "shard") if bounded_labels else ("phase", "shard", "batch_key", "attempt")
    batch_loss = Histogram("train_batch_loss", labelnames, registry)
    stop = threading.Event()

    def scraper():
        while not stop.wait(1.0):
            registry.scrape()

    scrape_thread = threading.Thread(target=scraper, daemon=True)
    scrape_thread.start()
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

    try:
        for step in range(steps):
            epoch, batch = divmod(step, BATCHES_PER_EPOCH)
            shard = int(rng.integers(SHARDS))
            y = rng.integers(0, CLASSES, BATCH).astype(np.int32)
            x = centers[y] + rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
            loss = float(train_step(x, y))
            if bounded_labels:
                child = batch_loss.labels(phase="train", shard=shard)           # the fix: bounded labels
            else:
                child = batch_loss.labels(phase="train", shard=shard, batch_key="%d-%d" % (epoch, batch),
                                          attempt=1)
            child.observe(loss)
            monitor.sample(step)
        return registry.scrape()
    finally:
        stop.set()
        scrape_thread.join()


def leaky(monitor, steps):
    _train(monitor, steps, bounded_labels=False)


def fixed(monitor, steps):
    _train(monitor, steps, bounded_labels=True)
