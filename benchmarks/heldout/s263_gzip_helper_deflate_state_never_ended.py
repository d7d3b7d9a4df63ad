"""A training job ships a gzip-compressed metrics snapshot to its dashboard every 48th step through a small ``ctypes`` binding to zlib written like rtorrent's ``gzip_compress_to_vector`` before pull request #1974: the helper calls ``deflateInit2`` and ``deflate`` but never ``deflateEnd``, so every call leaves zlib's deflate state (window, hash chains and pending buffer: ~260 KiB allocated, ~200 KiB of it resident after one 4 KiB payload) allocated in the C heap (plain Python + numpy + ``ctypes``, no TensorFlow; native memory only, no Python object grows; grows in steps, ~200 KiB resident once every 48 steps).

Source: rakshasa/rtorrent pull request #1974 "Release the zlib deflate state
in gzip_compress_to_vector" (merged): "``gzip_compress_to_vector`` calls
``deflateInit2`` at ``src/utils/gzip.cc:21`` and never calls ``deflateEnd``.
... the state allocated by a successful init is leaked on the normal return
... Measured under valgrind, 200 calls with a 4096 byte payload ... That is
about 168 kB per call". Fix used here (the PR's): ``deflateEnd`` runs on every
path (``try`` / ``finally`` in place of the PR's scope guard).
Summary: the binding declares zlib's ``z_stream`` with ``ctypes`` and calls
``deflateInit2_`` (gzip wrapper, window bits 15 + 16, memory level 8),
``deflate(Z_FINISH)`` into a bound-sized output buffer and, in the fixed
variant, ``deflateEnd``. The training loop is a numpy two-layer MLP (64-128-
10, SGD, batches of 64); every 48th step the last 100 losses and the layer
norms are formatted as a ~4 KiB JSON payload and compressed.

Here: 24,000 steps (500 compressed snapshots). The fixed helper ends the
stream.
"""
import collections
import ctypes
import ctypes.util
import json
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/rakshasa/rtorrent/pull/1974"
SLICE = "holdout22"
STEPS = 24000
EVERY = 48
BATCH = 64
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "malloc", "heap", "unexplained"]},
    "fixed": {"verdict_not": "leak"},
}

Z_FINISH = 4
Z_STREAM_END = 1
Z_DEFLATED = 8


class ZStream(ctypes.Structure):
    _fields_ = [("next_in", ctypes.c_void_p), ("avail_in", ctypes.c_uint), ("total_in", ctypes.c_ulong),
                ("next_out", ctypes.c_void_p), ("avail_out", ctypes.c_uint), ("total_out", ctypes.c_ulong),
                ("msg", ctypes.c_char_p), ("state", ctypes.c_void_p),
                ("zalloc", ctypes.c_void_p), ("zfree", ctypes.c_void_p), ("opaque", ctypes.c_void_p),
                ("data_type", ctypes.c_int), ("adler", ctypes.c_ulong), ("reserved", ctypes.c_ulong)]


_libz = ctypes.CDLL(ctypes.util.find_library("z") or "libz.so.1")
_libz.zlibVersion.restype = ctypes.c_char_p
_libz.deflateInit2_.argtypes = [ctypes.POINTER(ZStream), ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
_libz.deflate.argtypes = [ctypes.POINTER(ZStream), ctypes.c_int]
_libz.deflateEnd.argtypes = [ctypes.POINTER(ZStream)]
_libz.deflateBound.argtypes = [ctypes.POINTER(ZStream), ctypes.c_ulong]
_libz.deflateBound.restype = ctypes.c_ulong
_VERSION = _libz.zlibVersion()


def gzip_compress_to_bytes(data, end_stream):
    stream = ZStream()
    rc = _libz.deflateInit2_(ctypes.byref(stream), 6, Z_DEFLATED, 15 + 16, 8, 0, _VERSION, ctypes.sizeof(ZStream))
    if rc != 0:
        raise RuntimeError("deflateInit2 failed: %d" % rc)
    try:
        src = ctypes.create_string_buffer(data, len(data))
        out = ctypes.create_string_buffer(int(_libz.deflateBound(ctypes.byref(stream), len(data))) + 32)
        stream.next_in = ctypes.cast(src, ctypes.c_void_p)
        stream.avail_in = len(data)
        stream.next_out = ctypes.cast(out, ctypes.c_void_p)
        stream.avail_out = len(out)
        if _libz.deflate(ctypes.byref(stream), Z_FINISH) != Z_STREAM_END:
            raise RuntimeError("deflate did not finish")
        return out.raw[:stream.total_out]
    finally:
        if end_stream:                                   # the fix (rtorrent #1974)
            _libz.deflateEnd(ctypes.byref(stream))


def _run(monitor, steps, end_stream):
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((10, 64)).astype(np.float32)
    w1 = (rng.standard_normal((64, 256)) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((256, 10)) * 0.1).astype(np.float32)
    losses = collections.deque(maxlen=100)
    shipped = collections.deque(maxlen=4)
    for step in range(steps):
        y = rng.integers(0, 10, BATCH)
        x = centers[y] + rng.standard_normal((BATCH, 64)).astype(np.float32)
        h = np.maximum(x @ w1, 0)
        logits = h @ w2
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        losses.append(float(-np.log(p[np.arange(BATCH), y] + 1e-9).mean()))
        p[np.arange(BATCH), y] -= 1
        g2 = h.T @ p / BATCH
        gh = (p @ w2.T) * (h > 0)
        w1 -= 0.05 * (x.T @ gh / BATCH)
        w2 -= 0.05 * g2
        if step % EVERY == 0:
            payload = json.dumps({"step": step, "loss": list(losses),
                                  "norms": [float(np.linalg.norm(w1)), float(np.linalg.norm(w2))],
                                  "hist": np.histogram(w1, 64)[0].tolist()}).encode()
            shipped.append(gzip_compress_to_bytes(payload, end_stream))
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, end_stream=False)


def fixed(monitor, steps):
    _run(monitor, steps, end_stream=True)
