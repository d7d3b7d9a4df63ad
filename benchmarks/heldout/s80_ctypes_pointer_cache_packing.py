"""Records read zero-copy from a C ring buffer with ``np.ctypeslib.as_array(pointer, shape)``: once sequence packing makes every record a new length, ctypes caches a new pointer type per length forever (no TensorFlow; late onset).

Source: python/cpython#100926 "ctypes infinite pointer cache" ("If you are
using a factory to call ctypes.POINTER in a loop, the memory usage is
unbounded and unable to be reclaimed"; a commenter's reader did
``ctypes.cast(data, ctypes.POINTER(ctypes.c_ubyte * size))`` per chunk and
grew from 500 MB to 2.6 GB; ``ctypes._reset_cache()`` brought it back).
The same symptom was reported against numpy as numpy/numpy#6511
"np.ctypeslib.as_array leaks memory when used on a pointer" (a different
cause then); in numpy 2.4 ``as_array(pointer, shape)`` itself calls
``ctypes.POINTER(c_ubyte * n)`` for every new shape, and ctypes keeps each
pointer type (and the array type it points to) in
``ctypes._pointer_type_cache``. Fix: do not create a
pointer type per size; here, view the whole ring buffer once as one numpy
array and slice it per record.
Summary: a loader hands out ``(address, nbytes)`` for each record in a
shared ring buffer filled by a C producer, and the training loop wraps it
with ``np.ctypeslib.as_array``. During warm-up every record is padded to
the same 2 KiB, so one pointer type is cached; once sequence packing
starts (at 25 % of the run) records are variable-length byte blocks and
almost every length is new, so the cache grows by two ctypes types a
step.

Here: a 1 MiB ``ctypes`` buffer stands in for the producer's ring, records
of 0.5 to 256 KiB after warm-up; features are a 256-bin byte histogram of
the first 4 KiB, a 256-64-1 numpy MLP (eight SGD passes a record). The
fixed twin slices one numpy view of the ring.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky flat until
packing starts (+0.2 MiB over the first 20 %), then +97.7 MiB RSS from 20
% of the run to the end (~5.7 KiB per packed step, +12.7 gc-tracked
objects a step: ``PyCPointerType`` and ``PyCArrayType`` type objects with
their ``StgDict``, descriptors and tuples), fixed +0.1 MiB (gc objects
flat); ~0.5-0.65 ms a step (12-15 s; ~21 s under the runner).
"""
import ctypes
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/python/cpython/issues/100926"
SLICE = "holdout7"
STEPS = 24000
PACKING_FROM = 0.25        # fraction of the run with fixed-size (padded) records
RING_BYTES = 1 << 20
PADDED = 2048
HEAD = 4096                # bytes of each record turned into features
HIDDEN = 64
INNER = 8              # SGD passes over each record
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["PyCArrayType", "PyCPointerType", "ctypes", "c_ubyte"],
              "holder_any": ["_pointer_type_cache"]},
    "fixed": {"verdict_not": "leak"},
}


class RingReader:
    """Stands in for a C producer: records live in one ctypes buffer, handed out as (address, nbytes)."""

    def __init__(self, rng):
        self.ring = (ctypes.c_ubyte * RING_BYTES)()
        np.ctypeslib.as_array(self.ring)[:] = rng.integers(0, 256, RING_BYTES, dtype=np.uint8)
        self.base = ctypes.addressof(self.ring)
        self.rng = rng

    def next_record(self, packed):
        nbytes = int(self.rng.integers(512, 256 * 1024)) if packed else PADDED
        offset = int(self.rng.integers(0, RING_BYTES - nbytes))
        return self.base + offset, nbytes


def _train(monitor, steps, one_view):
    rng = np.random.default_rng(0)
    reader = RingReader(rng)
    ring_view = np.ctypeslib.as_array(reader.ring)            # the fix: one view of the whole ring
    w1 = rng.standard_normal((256, HIDDEN)) * 0.05
    w2 = np.zeros(HIDDEN)
    packing_from = int(steps * PACKING_FROM)
    for step in range(steps):
        addr, nbytes = reader.next_record(packed=step >= packing_from)
        if one_view:
            rec = ring_view[addr - reader.base: addr - reader.base + nbytes]
        else:
            ptr = ctypes.cast(addr, ctypes.POINTER(ctypes.c_ubyte))
            rec = np.ctypeslib.as_array(ptr, shape=(nbytes,))  # POINTER(c_ubyte * nbytes), cached
        x = np.bincount(rec[:HEAD], minlength=256) / min(nbytes, HEAD)
        y = float(nbytes > 64 * 1024)
        for _ in range(INNER):
            h = np.tanh(x @ w1)
            p = 1.0 / (1.0 + np.exp(-(h @ w2)))
            g = p - y
            w2 -= 0.1 * g * h
            w1 -= 0.1 * np.outer(x, g * w2 * (1 - h * h))
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, one_view=False)


def fixed(monitor, steps):
    _train(monitor, steps, one_view=True)
