"""A regression trainer checks a ZooKeeper ``LockingQueue`` of relabelled examples after every ``tf.function`` step with ``get(timeout=0)``; like kazoo's, each ``get()`` registers a fresh ``check_for_updates`` closure (with its event, lock and result cells) as a child watch on the queue's entries node, and a watch stays registered in the client until the node's children change, which never happens while nobody posts, so the client's watcher set grows by one closure per poll (``tf.function``; grows every step, ~2 KiB a step).

Source: python-zk/kazoo issue #175 "Memory leak in LockingQueue":
"Frequent calls of ``LockingQueue.get(timeout)`` lead to memory leaks, if
data in the queue rarely appear. This is due to the fact that more and more
instances of ``check_for_updates()`` registered as watchers. In our case,
this led to a huge memory consumption (several gigabytes per day)." Fix
used here (an adaptation; the issue was closed with the behaviour
documented): the queue registers one child watcher for its entries node
and reuses it, so a ``get()`` that times out leaves nothing behind.
Summary: a 32-64-64-1 regression MLP trained with Adam in a ``tf.function``
on batches of 128; after every step the trainer polls the queue that a
relabelling service would fill with corrected targets. The ZooKeeper
client is in-process (a node tree and kazoo's one-shot child watches kept
in ``_child_watchers``); the relabelling service posts nothing in this run.

Here: 14,000 steps. The fixed queue keeps one watcher per queue.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS
read before each object count, at the marks only): leaky 566.0 / 571.1 /
577.4 / 583.1 / 589.1 MiB RSS at 20 / 40 / 60 / 80 % / end (558.1 MiB at
the first step; ~2 KiB a step: a ``check_for_updates`` closure with its
cells, its ``threading.Event`` (condition and lock), its lock and its
result list in ``ZooKeeperClient._child_watchers``) with gc objects
324,917 at the first step, then 369,579 / 414,379 / 459,179 / 503,979 /
548,779 at the same marks (16 a step), 11.6 s for 14,000 steps (~0.83 ms a
step); fixed 562.0 / 562.1 / 562.1 / 562.1 / 562.1 MiB with objects
324,913 -> 324,921 (+2 a mark: the check's own records), 10.3 s (~0.73 ms
a step). 14-16 s a variant in its process, imports included.
"""
import collections
import os
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/python-zk/kazoo/issues/175"
SLICE = "holdout19"
STEPS = 14000
BATCH = 128
FEATURES = 32
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["function", "check_for_updates", "Event", "cell", "Condition"],
              "holder_any": ["_child_watchers", "ZooKeeperClient", "client"]},
    "fixed": {"verdict_not": "leak"},
}


class ChildEvent:
    def __init__(self, path):
        self.type = "CHILD"
        self.path = path


class ZooKeeperClient:
    """In-process stand-in for a kazoo client: nodes and one-shot child watches."""

    def __init__(self):
        self.children = collections.defaultdict(dict)
        self._child_watchers = collections.defaultdict(set)
        self._seq = 0

    def ensure_path(self, path):
        self.children.setdefault(path, {})

    def get_children(self, path, watch=None):
        if watch is not None:
            self._child_watchers[path].add(watch)            # kept until the children change
        return sorted(self.children[path])

    def create(self, path, value, sequence=False):
        parent, name = path.rsplit("/", 1)
        if sequence:
            name = "%s%010d" % (name, self._seq)
            self._seq += 1
        self.children[parent][name] = value
        for watcher in self._child_watchers.pop(parent, ()):  # one-shot watches fire
            watcher(ChildEvent(parent))
        return "%s/%s" % (parent, name)

    def delete(self, path):
        parent, name = path.rsplit("/", 1)
        self.children[parent].pop(name, None)


class LockingQueue:
    def __init__(self, client, path, one_watcher):
        self.client = client
        self.path = path
        self._entries_path = path + "/entries"
        self.one_watcher = one_watcher
        client.ensure_path(self._entries_path)
        self._cond = threading.Condition()
        self._watching = False

    def put(self, value):
        self.client.create(self._entries_path + "/entry-", value, sequence=True)

    def _take(self, names):
        if not names:
            return None
        name = names[0]
        value = self.client.children[self._entries_path][name]
        self.client.delete("%s/%s" % (self._entries_path, name))
        return value

    def get(self, timeout=None):
        if self.one_watcher:
            return self._get_shared_watch(timeout)
        flag = threading.Event()
        lock = threading.Lock()
        canceled = False
        value = []

        def check_for_updates(event):
            if event is not None and event.type != "CHILD":
                return
            with lock:
                if canceled or flag.is_set():
                    return
                names = self.client.get_children(self._entries_path, check_for_updates)
                taken = self._take(names)
                if taken is not None:
                    value.append(taken)
                    flag.set()

        check_for_updates(None)
        flag.wait(timeout)
        with lock:
            canceled = True
            return value[0] if value else None

    def _on_children(self, event):                           # the fix: one watcher per queue
        with self._cond:
            self._watching = False
            self._cond.notify_all()

    def _get_shared_watch(self, timeout):
        with self._cond:
            if not self._watching:
                self._watching = True
                names = self.client.get_children(self._entries_path, self._on_children)
            else:
                names = self.client.get_children(self._entries_path)
            taken = self._take(names)
            if taken is None and timeout:
                self._cond.wait(timeout)
                taken = self._take(self.client.get_children(self._entries_path))
            return taken


def _batch(rng, w, n):
    x = rng.standard_normal((n, FEATURES)).astype(np.float32)
    y = (np.tanh(x @ w) + 0.1 * rng.standard_normal(n)).astype(np.float32)[:, None]
    return x, y


def _train(monitor, steps, one_watcher):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(FEATURES) / np.sqrt(FEATURES)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    opt = keras.optimizers.Adam(1e-3)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    client = ZooKeeperClient()
    relabelled = LockingQueue(client, "/trainer/relabelled", one_watcher)
    corrections = 0
    for step in range(steps):
        x, y = _batch(rng, w_true, BATCH)
        train_step(tf.constant(x), tf.constant(y))
        item = relabelled.get(timeout=0)                     # nothing is ever posted in this run
        if item is not None:
            corrections += 1
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, one_watcher=False)


def fixed(monitor, steps):
    _train(monitor, steps, one_watcher=True)
