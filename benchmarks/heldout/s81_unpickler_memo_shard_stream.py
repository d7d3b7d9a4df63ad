"""A shard reader keeps one ``pickle.Unpickler`` for a whole stream of pickled records, and its memo keeps every record it has loaded (no TensorFlow).

Source: python/cpython#85594 (bpo-41422) "C Unpickler memory leak via
memo": an ``Unpickler`` reused for many ``load()`` calls on one stream
keeps every object it loaded in its memo (which must survive between
loads in case a later pickle refers back to it), so nothing it returned
is ever freed while the unpickler lives. Fix: the shard was written with
one ``pickle.dump`` per record, so each record is self-contained; read it
with a fresh ``pickle.load(f)`` per record (or clear the memo between
records).
Summary: a ``ShardReader`` opens a long shard of training records and
keeps ``self._unpickler = pickle.Unpickler(f)`` to avoid re-creating it
per record. Each record is a dict with its id, a float32 feature vector
and a label; the loop trains on it and drops it, but the unpickler's memo
still refers to the dict, the array and the id string.

Here: a 40,000-record shard (256 float32 features a record, ~1.2 KiB
pickled with the default protocol) written to a temporary file before
training, one record a step, a 256-64-1 numpy MLP. The fixed twin loads
each record with ``pickle.load``.

Checked without tb-leak (psutil RSS, gc objects, tracemalloc; fresh
process, Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky
+85.7 MiB RSS from 20 % of the run to the end (~2.8 KiB per step, steady;
tracemalloc +78.6 MiB, ~2.5 KiB per step) while gc object counts stay flat
(the records are untracked dicts of arrays, strings and ints, and the memo
lives inside the C unpickler), fixed +0.1 MiB RSS (tracemalloc +0.07 MiB);
~0.2-0.25 ms a step (8-10 s; ~13 s under the runner).
"""
import os
import pickle
import shutil
import tempfile

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/python/cpython/issues/85594"
SLICE = "holdout7"
STEPS = 40000
FEATURES = 256
HIDDEN = 64
INNER = 4              # SGD passes over each record
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "dict"],
              "holder_any": ["_unpickler", "ShardReader", "memo"]},
    "fixed": {"verdict_not": "leak"},
}


def write_shard(path, n_records, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(FEATURES).astype(np.float32)
    with open(path, "wb") as f:
        for i in range(n_records):
            x = rng.standard_normal(FEATURES).astype(np.float32)
            pickle.dump({"id": "sample-%08d" % i, "x": x, "y": int(x @ w > 0)}, f)  # one pickle per record


class ShardReader:
    def __init__(self, path, reuse_unpickler):
        self._f = open(path, "rb")
        self.reuse_unpickler = reuse_unpickler
        self._unpickler = pickle.Unpickler(self._f) if reuse_unpickler else None

    def __iter__(self):
        while True:
            try:
                if self.reuse_unpickler:
                    yield self._unpickler.load()       # its memo keeps every record
                else:
                    yield pickle.load(self._f)         # the fix: a fresh unpickler per record
            except EOFError:
                return

    def close(self):
        self._f.close()


def _train(monitor, steps, reuse_unpickler):
    tmp = tempfile.mkdtemp(prefix="s81-shard-")
    try:
        path = os.path.join(tmp, "train-00000.pkl")
        write_shard(path, steps)
        reader = ShardReader(path, reuse_unpickler)
        rng = np.random.default_rng(1)
        w1 = rng.standard_normal((FEATURES, HIDDEN)).astype(np.float32) * 0.05
        w2 = np.zeros(HIDDEN, dtype=np.float32)
        for step, rec in enumerate(reader):
            if step >= steps:
                break
            x, y = rec["x"], rec["y"]
            for _ in range(INNER):
                h = np.tanh(x @ w1)
                p = 1.0 / (1.0 + np.exp(-(h @ w2)))
                g = p - y
                w2 -= 0.05 * g * h
                w1 -= 0.05 * np.outer(x, g * w2 * (1 - h * h))
            monitor.sample(step)
        reader.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def leaky(monitor, steps):
    _train(monitor, steps, reuse_unpickler=True)


def fixed(monitor, steps):
    _train(monitor, steps, reuse_unpickler=False)
