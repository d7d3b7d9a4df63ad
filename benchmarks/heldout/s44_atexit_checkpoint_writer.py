"""Every checkpoint writer registers ``atexit.register(self.close)`` and is never unregistered (no TensorFlow).

Source: DataDog/dd-trace-py#2409 "refactor: add atexit internal wrapper with
unregister" ("The Tracer would never unregister its shutdown function which
introduces a memory leak. If you had a million tracer over the lifespan of
your program, then you would have a million tracers kept around to be
shutdown at exit time. True story!"); the same leak as ponty/EasyProcess#1
("every time the main process is starting the subprocess, the new reference
to shutdown is stored globally within atexit, causing a memory leak") and
cherrypy/cherrypy#1274. Fix from the PR: unregister the exit hook when the
object is shut down (``atexit.unregister(self.close)`` in ``close``).
Summary: a training loop snapshots its weights every 50 steps through a
small asynchronous checkpoint writer; the writer registers its ``close`` at
exit so that a crash mid-write still flushes, and ``close`` runs right after
the write, but the bound method stays in the interpreter's exit list and
keeps the writer and its serialized payload alive until the process ends.

Here: a numpy 64-128-10 MLP trained with SGD on batches of 64; each
checkpoint serializes the weights (~37 KiB) into the writer. The leak comes
in steps, one payload every 50 steps.

Checked without tb-leak (psutil RSS, fresh process, Python 3.11, numpy
2.4): leaky +14.7 MiB RSS from 20 % of the run to the end (~770 B per step on
average, in 37 KiB jumps), fixed +0.1 MiB (a payload allocated and freed every
50 steps); ~0.5-0.6 ms a step.
"""
import atexit
import zlib

import os

# Single-threaded BLAS: on 2 shared cores, OpenBLAS worker threads spinning next to other
# threads make each small matmul up to ~10x slower.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/DataDog/dd-trace-py/pull/2409"
SLICE = "holdout4"
STEPS = 25000
CHECKPOINT_EVERY = 50
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["AsyncCheckpointWriter", "bytes", "native"],
              "holder_any": ["atexit", "close"]},
    "fixed": {"verdict_not": "leak"},
}


class AsyncCheckpointWriter:
    """Writes one checkpoint; registers ``close`` at exit so an interrupted write still gets flushed."""

    def __init__(self, path, weights):
        self.path = path
        self.payload = b"".join(w.astype(np.float32).tobytes() for w in weights)
        self.crc = None
        self.closed = False
        atexit.register(self.close)

    def write(self):
        self.crc = zlib.crc32(self.payload)        # stands in for the file write on a worker thread

    def close(self):
        self.closed = True


class UnregisteringCheckpointWriter(AsyncCheckpointWriter):
    """The fix from the PR: unregister the exit hook once the writer is shut down."""

    def close(self):
        if not self.closed:
            self.closed = True
            atexit.unregister(self.close)


def _train(monitor, steps, writer_cls):
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((64, 128)) * 0.1
    w2 = rng.standard_normal((128, 10)) * 0.1
    centers = rng.standard_normal((10, 64))
    for step in range(steps):
        y = rng.integers(0, 10, size=64)
        x = centers[y] + rng.standard_normal((64, 64))
        h = np.maximum(x @ w1, 0.0)
        z = h @ w2
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(64), y] -= 1.0
        gh = (p @ w2.T) * (h > 0)
        w2 -= 0.05 * h.T @ p / 64
        w1 -= 0.05 * x.T @ gh / 64
        if step % CHECKPOINT_EVERY == CHECKPOINT_EVERY - 1:
            writer = writer_cls("ckpt-%06d.npz" % step, [w1, w2])
            writer.write()
            writer.close()
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, AsyncCheckpointWriter)


def fixed(monitor, steps):
    _train(monitor, steps, UnregisteringCheckpointWriter)
