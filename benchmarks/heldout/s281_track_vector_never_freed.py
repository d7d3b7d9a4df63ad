"""A numpy pipeline builds a trajectory dataset for a motion model by linking detections frame window by frame window through a min-cost-flow tracker bound with ``ctypes`` like CINDA before issue #12 was fixed: the C solver ``pyCS2()`` returns a pointer to a ``malloc``'d track vector that the Python side converts and never frees, so every window leaves its track vector (~4 KiB) in the C heap while a small motion model is fitted on the linked tracks (plain Python + numpy, no TensorFlow; native memory only, no Python object grows).

Source: yu-lab-vt/CINDA issue #12 "Memory leak in pyCS2() return pointer"
(closed): "The returned pointer from pyCS2() function is never freed. I
solved this problem by adding the following function to cinda_funcs.c:
``void pyFreeTrackVec(price_t *track_vec) { free(track_vec); }`` And then,
in algo.py, at the end of mcc4mot(): ``_cinda.pyFreeTrackVec(track_vec)``."
Maintainer: "Cool. Thank you very much. We will append this fix to our
code." Fix used here (the issue's): ``mcc4mot`` calls ``pyFreeTrackVec`` on
the vector once the trajectories are read out of it (allocator churn, no
growth).
Summary: the solver is a stand-in with CINDA's calling shape
(``mcc4mot(detections, transitions)`` builds the arc arrays, calls the
"C" ``pyCS2`` which ``malloc``s a ``long long`` track vector, fills it
with the linked node ids, and returns the pointer); the linking itself is
a greedy nearest-successor assignment done in numpy over 240 detections in
three frames. Each step links one window, reads the trajectories back with
``np.ctypeslib.as_array`` and takes one SGD step of a constant-velocity
motion model (a 4x4 linear map) on the linked pairs.

Here: 14,000 windows. The fixed binding frees the track vector.
"""
import collections
import ctypes
import ctypes.util
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/yu-lab-vt/CINDA/issues/12"
SLICE = "holdout24"
STEPS = 14000
PER_FRAME = 80
FRAMES = 3
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "malloc", "heap", "unexplained"]},
    "fixed": {"verdict_not": "leak"},
}

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]
_price_t = ctypes.c_longlong


def pyCS2(n_nodes, succ):
    """The "C" solver: returns a malloc'd track vector (node ids, -1 separated) and its length."""
    length = 2 * n_nodes + 16
    track_vec = ctypes.cast(_libc.malloc(length * ctypes.sizeof(_price_t)), ctypes.POINTER(_price_t))
    buf = np.ctypeslib.as_array(track_vec, (length,))
    buf[:] = -1
    k = 0
    starts = np.setdiff1d(np.arange(n_nodes), succ[succ >= 0])
    for s in starts:
        node = int(s)
        while node >= 0 and k < length - 1:
            buf[k] = node
            k += 1
            node = int(succ[node])
        k += 1                                            # -1 separator
    return track_vec, length


def pyFreeTrackVec(track_vec):
    _libc.free(ctypes.cast(track_vec, ctypes.c_void_p))


def mcc4mot(positions, free_vec):
    """CINDA-style entry: link detections over consecutive frames, return trajectories."""
    n = len(positions)
    succ = np.full(n, -1, np.int64)
    for f in range(FRAMES - 1):
        a = np.arange(f * PER_FRAME, (f + 1) * PER_FRAME)
        b = np.arange((f + 1) * PER_FRAME, (f + 2) * PER_FRAME)
        d = ((positions[a, None, :] - positions[None, b, :]) ** 2).sum(-1)
        taken = np.zeros(PER_FRAME, bool)
        for i in np.argsort(d.min(1)):
            row = np.where(taken, np.inf, d[i])
            j = int(row.argmin())
            if row[j] < 4.0:
                succ[a[i]] = b[j]
                taken[j] = True
    track_vec, length = pyCS2(n, succ)
    flat = np.ctypeslib.as_array(track_vec, (length,)).copy()
    if free_vec:
        pyFreeTrackVec(track_vec)                         # the fix (CINDA #12)
    cuts = np.flatnonzero(flat < 0)
    tracks, prev = [], 0
    for c in cuts:
        if c - prev >= 2:
            tracks.append(flat[prev:c])
        prev = c + 1
    return tracks


def _run(monitor, steps, free_vec):
    rng = np.random.default_rng(0)
    true_a = np.eye(4) + np.diag([0.1, 0.1], 2)
    a_hat = np.eye(4)
    errs = collections.deque(maxlen=200)
    for step in range(steps):
        state = np.concatenate([rng.uniform(0, 100, (PER_FRAME, 2)), rng.normal(0, 0.8, (PER_FRAME, 2))], 1)
        frames = []
        for _ in range(FRAMES):
            frames.append(state[:, :2] + rng.normal(0, 0.05, (PER_FRAME, 2)))
            state = state @ true_a.T
        positions = np.concatenate(frames)
        tracks = mcc4mot(positions, free_vec)
        pairs = [(t[i], t[i + 1], t[i + 2]) for t in tracks for i in range(len(t) - 2)]
        if pairs:
            p = np.array(pairs)
            x = np.concatenate([positions[p[:, 1]], positions[p[:, 1]] - positions[p[:, 0]]], 1)
            y = np.concatenate([positions[p[:, 2]], positions[p[:, 2]] - positions[p[:, 1]]], 1)
            err = x @ a_hat.T - y
            a_hat -= 1e-4 * err.T @ x / len(x)
            errs.append(float((err ** 2).mean()))
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, free_vec=False)


def fixed(monitor, steps):
    _run(monitor, steps, free_vec=True)
