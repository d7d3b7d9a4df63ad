"""A numpy image-embedding pipeline decodes a stream of JPEG XL thumbnails with ``PIL.Image.open(BytesIO(data))`` through a plugin written like jxlpy's ``JXLImagePlugin`` at the time of issue #12: the plugin opens a native decoder for every image and only ``img._decoder.close()`` frees it, which neither ``load()`` nor dropping the image does, so every decoded thumbnail leaves its decoder's native state (~8 KiB) in the C heap while a linear probe trains on the pixels (plain Python + numpy, no TensorFlow; native memory only, no Python object grows).

Source: olokelo/jxlpy issue #12 "Memory leak in decoding" (closed): "The
following code causes the python process to use unbounded memory: ``for i
in range(10000): PIL.Image.open(BytesIO(img))`` where img is a random JXL
image. I think the issue is that img._decoder.close() is never called.
``img = PIL.Image.open(BytesIO(img)); img._decoder.close()`` works fine
(barely any memory use)". Fix used here (the issue's): the pipeline closes
each image's decoder once its pixels are read, so each decoder's state is
allocated and released (allocator churn, no growth).
Summary: the plugin is a stand-in with jxlpy's shape (an image file class
whose ``_open`` creates ``self._decoder = JXLPyDecoder(data)``, ``load()``
reading pixels through it, ``_decoder.close()`` releasing it); the
"native decoder" ``malloc``s its working state (a 32x32 RGB frame buffer
plus entropy-coder tables, filled, so resident) and decodes a thumbnail
from its synthetic bytes (a seeded gradient pattern per image). Each step
decodes one thumbnail into a replay window of the last 256 (a bounded
deque) and takes an SGD step of a 3,072-to-8 linear probe on the window
against synthetic labels.

Here: 10,000 steps. The fixed pipeline closes each decoder.
"""
import collections
import ctypes
import ctypes.util
import io
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/olokelo/jxlpy/issues/12"
SLICE = "holdout24"
STEPS = 10000
WINDOW = 256
SIDE = 32
CLASSES = 8
STATE_BYTES = SIDE * SIDE * 3 + 5 * 1024
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "malloc", "heap", "unexplained"]},
    "fixed": {"verdict_not": "leak"},
}

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]
_libc.memset.restype = ctypes.c_void_p
_libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]


class JXLPyDecoder:
    """Native-decoder-like object: its state is freed only by close()."""

    def __init__(self, data):
        self._data = data
        self._state = _libc.malloc(STATE_BYTES)
        _libc.memset(self._state, data[8], STATE_BYTES)

    def get_frame(self):
        seed = int.from_bytes(self._data[4:8], "little")
        frame = np.ctypeslib.as_array(ctypes.cast(self._state, ctypes.POINTER(ctypes.c_uint8)), (SIDE, SIDE, 3))
        yy, xx = np.mgrid[0:SIDE, 0:SIDE]
        frame[..., 0] = (xx * (seed % 7 + 1)) % 256
        frame[..., 1] = (yy * (seed % 5 + 1)) % 256
        frame[..., 2] = ((xx + yy) * (seed % 3 + 1)) % 256
        return frame.copy()

    def close(self):
        if self._state:
            _libc.free(self._state)
            self._state = None


class JXLImageFile:
    """PIL ImageFile-like plugin class for JPEG XL."""
    format = "JXL"

    def __init__(self, fp):
        self.fp = fp
        self._open()

    def _open(self):
        data = self.fp.read()
        if data[:2] != b"\xff\x0a":
            raise SyntaxError("not a JPEG XL codestream")
        self._decoder = JXLPyDecoder(data)
        self.size = (SIDE, SIDE)
        self.mode = "RGB"

    def load(self):
        return self._decoder.get_frame()


def open_image(fp):
    return JXLImageFile(fp)


def _run(monitor, steps, close_decoder):
    rng = np.random.default_rng(0)
    w = np.zeros((SIDE * SIDE * 3, CLASSES), np.float32)
    accs = collections.deque(maxlen=200)
    xs = collections.deque(maxlen=WINDOW)
    ys = collections.deque(maxlen=WINDOW)
    for step in range(steps):
        for _ in range(1):
            seed = int(rng.integers(1 << 30))
            blob = b"\xff\x0a" + b"\x00\x00" + seed.to_bytes(4, "little") + bytes([seed & 0xFF]) + b"\x00" * 55
            img = open_image(io.BytesIO(blob))
            px = img.load()
            if close_decoder:
                img._decoder.close()                      # the fix (jxlpy #12)
            xs.append(px.reshape(-1).astype(np.float32) / 255.0)
            ys.append((seed % 7 + seed % 5) % CLASSES)
        x = np.stack(xs)
        y = np.array(ys)
        logits = x @ w
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        accs.append(float((p.argmax(1) == y).mean()))
        p[np.arange(len(y)), y] -= 1
        w -= 0.01 * x.T @ p / len(y)
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, close_decoder=False)


def fixed(monitor, steps):
    _run(monitor, steps, close_decoder=True)
