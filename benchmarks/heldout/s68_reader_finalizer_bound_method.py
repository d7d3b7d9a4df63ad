"""Once training streams past its in-memory part, each chunk reader registers ``weakref.finalize(self, self.close)``, and the bound method keeps every reader and its chunk alive (no TensorFlow; late onset).

Source: DiamondLightSource/httomo#265 "Fix memory leak caused by
reader/writer objects not being garbage collected during pipeline
execution" (the functions passed to ``weakref.finalize()`` "are indeed
bound methods on the objects being passed in ... which contains a reference
to the ``reader`` object", so the finalizer registry keeps each one alive;
the Python docs warn that func, args and kwargs must not own references to
obj). Fix from the PR: a finalizer that does not reference the object (here
a module-level function given only the reader's small file handle).
Summary: the first 30 % of training reads batches from an array already in
memory; after that the loop streams chunks from a chunk store, one
``ChunkReader`` per batch, each holding its decoded chunk. The readers go
out of scope after use, but ``weakref.finalize``'s registry holds the bound
``close`` method, so none of them is ever freed: a leak that starts late.

Here: 16 x 64 float32 chunks (4 KiB), a fixed random tanh projection to 512 features and 25
least-squares updates a batch. The fixed
twin's readers are freed as soon as they go out of scope.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy; a do-nothing ``monitor.sample``): leaky flat for the first 30 % (+0.2 MiB), then +127 MiB RSS from 20 % of
the run to the end, all of it after the onset (~4.1 KiB and ~5 gc-tracked
objects per streamed step), fixed +0.01 MiB (gc objects flat); ~0.3-0.4 ms a
step (13-16 s).
"""
import os
import weakref

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/DiamondLightSource/httomo/pull/265"
SLICE = "holdout6"
STEPS = 40000
STREAM_FROM = 0.3          # fraction of the run read from memory before streaming starts
ROWS, COLS = 16, 64
HIDDEN = 512
INNER = 25
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "ChunkReader", "finalize"],
              "holder_any": ["finalize", "_registry", "close"]},
    "fixed": {"verdict_not": "leak"},
}


class _Handle:
    """Stands in for an open file / dataset handle."""
    __slots__ = ("chunk_id", "open")

    def __init__(self, chunk_id):
        self.chunk_id = chunk_id
        self.open = True


def _close_handle(handle):
    handle.open = False


class ChunkReader:
    def __init__(self, chunk_id, rng, finalizer_holds_self):
        self._handle = _Handle(chunk_id)
        self.chunk = rng.standard_normal((ROWS, COLS)).astype(np.float32)   # decoded chunk, 4 KiB
        if finalizer_holds_self:
            self._finalizer = weakref.finalize(self, self.close)  # bound method: keeps self alive
        else:
            self._finalizer = weakref.finalize(self, _close_handle, self._handle)

    def close(self):
        _close_handle(self._handle)

    def read(self):
        return self.chunk


def _train(monitor, steps, finalizer_holds_self):
    rng = np.random.default_rng(0)
    in_memory = rng.standard_normal((50, ROWS, COLS)).astype(np.float32)
    proj = (rng.standard_normal((COLS, HIDDEN)) / np.sqrt(COLS)).astype(np.float32)
    w_true = rng.standard_normal(HIDDEN).astype(np.float32)
    w = np.zeros(HIDDEN, dtype=np.float32)
    start_stream = int(steps * STREAM_FROM)
    for step in range(steps):
        if step < start_stream:
            x = in_memory[step % len(in_memory)]
        else:
            reader = ChunkReader(step, rng, finalizer_holds_self)
            x = reader.read()
        h = np.tanh(x @ proj)
        y = h @ w_true
        for _ in range(INNER):
            w -= 0.01 * h.T @ (h @ w - y) / ROWS
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, finalizer_holds_self=True)


def fixed(monitor, steps):
    _train(monitor, steps, finalizer_holds_self=False)
