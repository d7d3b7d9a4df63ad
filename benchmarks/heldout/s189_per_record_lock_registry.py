"""A streaming record reader shared by a prefetch thread and the training loop (which re-reads recent hard examples) guards the decoding of each record with its own lock, taken from a registry with ``self._locks.setdefault(key, threading.RLock())``; releasing the lock never removes it, so the registry keeps one key string and one ``RLock`` for every record the run has ever read, although the stream never comes back to old records (``tf.function`` training step; grows every step).

Source: cherrypy/cherrypy issue #1082 "RamSession leak": "Every request on
a cherrypy server using RamSession ... will cause a memory leak ...
RamSession released its lock every time, but kept the threading.RLock
object in its 'self.locks' dictionary", with the fix "del
self.locks[self.id]  # add this to remove memory the leak" in
``release_lock``; the same leak in joanvila/aioredlock issue #101 ("you
don't remove item from _locks dictionary in def unlock") and
Cyberdrop-DL/cyberdrop-dl pull request #1257 (file locks, fixed with a
``weakref.WeakValueDictionary``). Fix used here (CherryPy's): the reader
counts the holders of each key's lock and deletes the entry when the last
one releases it.
Summary: a 64-128-1 regressor trained with a ``tf.function`` step on
batches of 32 records streamed from 2,000-record shards (zlib-compressed
float32 rows, decoded on read); a prefetch thread reads ahead two batches,
the loop re-reads 4 of the previous batch's hardest records, and decoded
rows sit in a 256-entry LRU.

Here: 5,000 steps (~160,000 records). The fixed twin drops released locks.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21; a do-nothing ``monitor.sample``): leaky 559.3 /
568.4 / 578.3 / 583.0 / 588.9 MiB RSS at 20 / 40 / 60 / 80 % / end (~7 KiB
a step: 32 key strings and ``RLock`` objects) with gc objects 352,510 /
384,369 / 416,509 / 448,442 / 480,320 (~32 a step), 14.3 s for 5,000 steps
(~2.9 ms a step); fixed 552.5 / 555.1 / 555.2 / 555.2 / 555.3 MiB with
objects 320,710 -> 320,456, 15.3 s.
"""
import collections
import os
import queue
import threading
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/cherrypy/cherrypy/issues/1082"
SLICE = "holdout16"
STEPS = 5000
BATCH = 32
FEATURES = 64
SHARD = 2000
LRU = 256
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["RLock", "str", "dict", "native", "lock"],
              "holder_any": ["_locks", "RecordReader", "reader"]},
    "fixed": {"verdict_not": "leak"},
}


class RecordReader:
    def __init__(self, w_true, drop_released):
        self.w_true = w_true
        self.drop_released = drop_released
        self._locks = {}
        self._holders = collections.Counter()
        self._registry_lock = threading.Lock()
        self._lru = collections.OrderedDict()
        self.decoded = 0

    def _blob(self, key):
        """Stands in for reading the record's bytes from its shard file."""
        shard, rec = key
        r = np.random.default_rng(shard * SHARD + rec)
        x = r.standard_normal(FEATURES).astype(np.float32)
        y = np.float32(np.tanh(x @ self.w_true) + 0.05 * r.standard_normal())
        return zlib.compress(np.append(x, y).tobytes(), 1)

    def _acquire(self, name):
        with self._registry_lock:
            lock = self._locks.setdefault(name, threading.RLock())   # the leak: never removed again
            self._holders[name] += 1
        lock.acquire()
        return lock

    def _release(self, name, lock):
        lock.release()
        with self._registry_lock:
            self._holders[name] -= 1
            if self._holders[name] == 0:
                del self._holders[name]
                if self.drop_released:
                    del self._locks[name]                            # the fix (CherryPy's release_lock)

    def get(self, key):
        name = "shard-%06d/rec-%05d.zrec" % key
        lock = self._acquire(name)
        try:
            row = self._lru.get(name)
            if row is None:
                row = np.frombuffer(zlib.decompress(self._blob(key)), np.float32)
                self.decoded += 1
                self._lru[name] = row
                while len(self._lru) > LRU:
                    self._lru.popitem(last=False)
            return row
        finally:
            self._release(name, lock)


def _prefetch(reader, out, stop, steps):
    pos = 0
    for _ in range(steps):
        keys = [divmod(pos + i, SHARD) for i in range(BATCH)]
        pos += BATCH
        rows = np.stack([reader.get(k) for k in keys])
        while not stop.is_set():
            try:
                out.put((keys, rows), timeout=0.1)
                break
            except queue.Full:
                continue
        if stop.is_set():
            return


def _train(monitor, steps, drop_released):
    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(FEATURES).astype(np.float32) / 8
    reader = RecordReader(w_true, drop_released)
    w1 = tf.Variable(tf.random.normal((FEATURES, 128), stddev=0.1))
    w2 = tf.Variable(tf.zeros((128, 1)))
    opt = tf.keras.optimizers.Adam(1e-3)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            err = (tf.nn.tanh(x @ w1) @ w2)[:, 0] - y
            loss = tf.reduce_mean(err ** 2)
        grads = tape.gradient(loss, [w1, w2])
        opt.apply_gradients(zip(grads, [w1, w2]))
        return err

    batches = queue.Queue(maxsize=2)
    stop = threading.Event()
    worker = threading.Thread(target=_prefetch, args=(reader, batches, stop, steps), daemon=True)
    worker.start()
    hard = []
    try:
        for step in range(steps):
            keys, rows = batches.get()
            if hard:
                rows = np.concatenate([rows, np.stack([reader.get(k) for k in hard])])
            err = train_step(tf.constant(rows[:, :-1]), tf.constant(rows[:, -1])).numpy()
            worst = np.argsort(-np.abs(err[:BATCH]))[:4]
            hard = [keys[i] for i in worst]
            monitor.sample(step)
    finally:
        stop.set()
        worker.join()


def leaky(monitor, steps):
    _train(monitor, steps, drop_released=False)


def fixed(monitor, steps):
    _train(monitor, steps, drop_released=True)
