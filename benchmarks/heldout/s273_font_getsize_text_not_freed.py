"""A synthetic-OCR trainer renders twelve random text labels into numpy images every step and measures each label with the font's ``getsize`` first; the font's C helper is written like Pillow 4.2.0's ``font_getsize``, which converted the text into a freshly allocated UCS-4 buffer and returned without freeing it, so every measured label leaves its text copy in the C heap (plain Python + numpy + ``ctypes``, no TensorFlow; native memory only, small: ~1.4 KiB a step).

Source: python-pillow/Pillow issue #2629 "4.2.0+ font rendering mem leak"
(closed): "mem usage keeps increasing every cycle for :
``ImageFont.py:113`` ... it doesn't happen in ... pillow <= 4.1.1 / it does
in >= 4.20"; fixed by pull request #2634 "Fix for memory leaks in font
handling" (merged, "Fixes #2629": "Fix for memory leak in PILfont getsize /
Fix for memory leak in truetype getsize", freeing the converted ``text``
buffer on every path). Fix used here (the PR's): the helper frees the text
buffer before it returns.
Summary: the font is a stand-in with Pillow's shape: ``getsize(text)`` calls
a native helper that ``malloc``s ``4 * (len(text) + 1)`` bytes, copies the
code points in (through ``ctypes``) and returns the width and height; in the
leaky build the buffer is never freed. Glyph bitmaps (7x5, random but fixed
per character) are cached in a dict on first use in both builds (a warm-up:
62 characters). Each step renders 12 labels of 12-40 characters into a 16 x
256 canvas and trains a numpy logistic "label length" regressor on
downsampled canvases.

Here: 24,000 steps. The fixed helper frees the buffer.
"""
import collections
import ctypes
import ctypes.util
import os
import string

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/python-pillow/Pillow/issues/2629"
SLICE = "holdout23"
STEPS = 24000
LABELS = 12
CHARS = string.ascii_letters + string.digits
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "malloc", "heap", "unexplained"]},
    "fixed": {"verdict_not": "leak"},
}

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]


class FreeTypeFont:
    free_text = True

    def __init__(self, size, rng):
        self.size = size
        self.rng = rng
        self.glyphs = {}

    def _to_ucs4(self, text):
        n = len(text)
        buf = _libc.malloc(4 * (n + 1))
        arr = (ctypes.c_uint32 * (n + 1)).from_address(buf)
        for i, ch in enumerate(text):
            arr[i] = ord(ch)
        arr[n] = 0
        return buf, n

    def getsize(self, text):
        buf, n = self._to_ucs4(text)
        width, height = n * 6, 8
        if self.free_text:                              # Pillow #2634: free(text) on every path
            _libc.free(buf)
        return width, height

    def glyph(self, ch):
        g = self.glyphs.get(ch)
        if g is None:
            g = self.glyphs[ch] = (self.rng.random((7, 5)) > 0.5).astype(np.float32)
        return g


def _render(font, text, canvas, row):
    w, h = font.getsize(text)
    x = 0
    for ch in text:
        if x + 5 > canvas.shape[1]:
            break
        canvas[row:row + 7, x:x + 5] = font.glyph(ch)
        x += 6
    return w


def _run(monitor, steps, free_text):
    FreeTypeFont.free_text = free_text
    rng = np.random.default_rng(0)
    font = FreeTypeFont(12, np.random.default_rng(1))
    w = np.zeros(16 * 64 + 1)
    losses = collections.deque(maxlen=200)
    chars = np.array(list(CHARS))
    for step in range(steps):
        xs, ys = [], []
        for _ in range(LABELS):
            n = int(rng.integers(12, 41))
            text = "".join(chars[rng.integers(0, len(CHARS), n)])
            canvas = np.zeros((16, 256), np.float32)
            width = _render(font, text, canvas, 4)
            xs.append(np.append(canvas.reshape(16, 64, 4).mean(2).ravel(), 1.0))
            ys.append(min(width, 256) / 256.0)
        x = np.array(xs)
        y = np.array(ys)
        pred = x @ w
        losses.append(float(np.mean((pred - y) ** 2)))
        w -= 0.05 * x.T @ (pred - y) / LABELS
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, free_text=False)


def fixed(monitor, steps):
    _run(monitor, steps, free_text=True)
