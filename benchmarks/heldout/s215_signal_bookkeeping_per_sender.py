"""A data pipeline announces every batch on a blinker-style ``batch_ready`` signal with the batch's key string as the sender, and the trainer attaches a fresh closure (a schema check bound to that batch) for the duration of the batch with ``connected_to(check, sender=key)``; disconnecting removes the receiver, but the sender's bookkeeping bucket, an empty ``set`` in ``Signal._by_sender[key]``, stays behind (a string sender cannot be weakly referenced, so nothing ever prunes it), and since every disconnect walks all buckets the step also gets slower (``tf.function``; grows every step, ~0.35 KiB and one set a step, with a step time that grows).

Source: pallets-eco/blinker pull request #12 "Fixed memory leaks.": "I
found a big memory leaks in my project. After studying the problem I have
identified the source of the leaks is a dictionaries ``Signal._by_sender``
and ``Signal._by_receiver``."; the maintainer's alternative fix (#13)
added ``Signal._cleanup_bookkeeping``: "With a long-running Python process
performing dynamic signal routing with high volume- e.g. connecting to
function closures, \\"senders\\" are all unique object instances, and doing
all of this over and over- you may see memory usage will grow due to
extraneous bookkeeping. (An empty set() for each stale sender/receiver
pair.) This method will prune that bookkeeping away". Fix used here (the
PR's): the trainer prunes the bookkeeping after each batch's receiver is
disconnected.
Summary: a 24-48-48-3 classifier trained with Adam in a ``tf.function``
on batches of 96 rows; each batch is assembled by a pipeline that sends
``batch_ready`` (sender ``"shard-<s>/batch-<i>"``) to the connected checks
(a per-batch closure validating ranges and counting bad rows, plus a
long-lived logger connected to any sender).

Here: 16,000 steps. The fixed trainer calls ``_cleanup_bookkeeping()``
after every batch.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS
and object counts from separate runs): leaky 560.4 / 561.3 / 562.3 / 563.8
/ 564.7 MiB RSS at 20 / 40 / 60 / 80 % / end (~0.34 KiB a step: an empty
``set`` and its key string in ``batch_ready._by_sender``) with gc objects
328,061 / 331,261 / 334,461 / 337,661 / 340,861 at the same marks (1 a
step), 17.7 s for 16,000 steps (~1.1 ms a step on average, the
disconnect's walk over the stale buckets growing with them); fixed 559.4 /
559.4 / 559.4 / 559.4 / 559.5 MiB with objects 324,861 at every mark, 12.1
s (~0.76 ms a step).
"""
import collections
import contextlib
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/pallets-eco/blinker/pull/12"
SLICE = "holdout18"
STEPS = 16000
BATCH = 96
FEATURES = 24
CLASSES = 3
PER_SHARD = 500
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["set", "str", "dict", "Signal"],
              "holder_any": ["_by_sender", "Signal", "batch_ready"]},
    "fixed": {"verdict_not": "leak"},
}

ANY = object()
ANY_ID = 0


def hashable_identity(obj):
    if hasattr(obj, "__func__"):
        return (id(obj.__func__), id(obj.__self__))
    if isinstance(obj, str):
        return obj
    return id(obj)


class Signal:
    """blinker 1.3's Signal, strong receivers only (``weak=False``), string or object senders."""

    def __init__(self, name):
        self.name = name
        self.receivers = {}
        self._by_receiver = collections.defaultdict(set)
        self._by_sender = collections.defaultdict(set)

    def connect(self, receiver, sender=ANY):
        receiver_id = hashable_identity(receiver)
        sender_id = ANY_ID if sender is ANY else hashable_identity(sender)
        self.receivers.setdefault(receiver_id, receiver)
        self._by_sender[sender_id].add(receiver_id)
        self._by_receiver[receiver_id].add(sender_id)
        return receiver

    def disconnect(self, receiver, sender=ANY):
        receiver_id = hashable_identity(receiver)
        if sender is ANY:
            if self._by_receiver.pop(receiver_id, False):
                for bucket in self._by_sender.values():      # every bucket, stale ones too
                    bucket.discard(receiver_id)
            self.receivers.pop(receiver_id, None)
        else:
            sender_id = hashable_identity(sender)
            self._by_sender[sender_id].discard(receiver_id)
            self._by_receiver[receiver_id].discard(sender_id)

    @contextlib.contextmanager
    def connected_to(self, receiver, sender=ANY):
        self.connect(receiver, sender=sender)
        try:
            yield None
        finally:
            self.disconnect(receiver)

    def send(self, sender, **kwargs):
        sender_id = hashable_identity(sender)
        ids = self._by_sender[ANY_ID] | self._by_sender.get(sender_id, set())
        return [(self.receivers[r], self.receivers[r](sender, **kwargs)) for r in ids]

    def _cleanup_bookkeeping(self):
        """blinker#13: prune empty sender/receiver buckets (not thread-safe)."""
        for mapping in (self._by_sender, self._by_receiver):
            for key, bucket in list(mapping.items()):
                if not bucket:
                    mapping.pop(key, None)


batch_ready = Signal("batch-ready")


def _make_check(lo, hi, stats):
    def check(sender, x, y):
        bad = int(np.count_nonzero((x < lo) | (x > hi)))
        stats["bad_values"] += bad
        return bad
    return check


def _train(monitor, steps, prune):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(48, activation="relu"),
                              keras.layers.Dense(48, activation="relu"), keras.layers.Dense(CLASSES)])
    opt = keras.optimizers.Adam(1e-3)
    xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = xent(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    log = collections.Counter()
    batch_ready.connect(lambda sender, x, y: log.update(rows=len(y)))   # a long-lived listener
    stats = collections.Counter()
    for step in range(steps):
        key = "shard-%04d/batch-%05d" % divmod(step, PER_SHARD)
        y = rng.integers(0, CLASSES, BATCH)
        x = (centers[y] + rng.standard_normal((BATCH, FEATURES))).astype(np.float32)
        check = _make_check(-4.5, 4.5, stats)                # a closure per batch
        with batch_ready.connected_to(check, sender=key):
            batch_ready.send(key, x=x, y=y)
        if prune:
            batch_ready._cleanup_bookkeeping()               # the fix (blinker#13)
        train_step(tf.constant(x), tf.constant(y))
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, prune=False)


def fixed(monitor, steps):
    _train(monitor, steps, prune=True)
