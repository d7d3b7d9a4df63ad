"""An eager TensorFlow vision policy is trained on frames rendered by a scene-graph library whose bitmap binding is written like libavg's ``Bitmap.getPixels`` before pull request #564: ``getPixels(True)`` copies the pixels into a ``malloc``'d buffer and hands it to Python with ``PyBuffer_FromMemory``, which never owns (or frees) the memory it wraps, so every frame's copy stays in the C heap after the Python buffer is gone (TensorFlow eager; native memory only: ~9 KiB a step, no Python object grows).

Source: libavg/libavg pull request #564 "Fix memleak in
bmp.getPixels(True) [fixes #562]" (merged): "the reason is that
``pBufCopy`` would not be deallocated automatically as '[The caller is
responsible for the data ptr]' when using ``PyBuffer_FromMemory``, when the
PythonObject is destroyed. [``PyBuffer_New`` maintains its own memory] so it
should automatically deallocate the memory. (It works for the sample
program given in #562)". Fix used here (the PR's): the copy goes into a
buffer that owns its memory (a ``bytearray`` here, like ``PyBuffer_New``),
freed with the Python object (allocator churn, no growth).
Summary: the bitmap is a stand-in with libavg's shape (``Bitmap`` with
``getSize()`` and ``getPixels(copy)``); the leaky copy ``malloc``s
``w * h * 4`` bytes, ``memmove``s the pixels and wraps the address in a
``ctypes`` array that does not own it. Each step renders a 48x48 RGBA frame
of a moving target (numpy), reads it with ``getPixels(True)`` and takes one
``GradientTape`` step of a Keras conv net (8 filters, pooling, 2 outputs)
regressing the target's position.

Here: 2,000 steps. The fixed copy owns its memory.
"""
import ctypes
import ctypes.util
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/libavg/libavg/pull/564"
SLICE = "holdout25"
STEPS = 2000
SIDE = 48
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "malloc", "heap", "unexplained"]},
    "fixed": {"verdict_not": "leak"},
}

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]


class Bitmap:
    """libavg ``Bitmap``-like."""
    owned_copy = True

    def __init__(self, pixels):
        self._pixels = pixels                                   # the bitmap's own store

    def getSize(self):
        return self._pixels.shape[1], self._pixels.shape[0]

    def getPixels(self, copy=True):
        if not copy:
            return memoryview(self._pixels).cast("B")
        n = self._pixels.nbytes
        if Bitmap.owned_copy:
            return bytearray(self._pixels.tobytes())            # PyBuffer_New: owns its memory (the fix)
        p_buf_copy = _libc.malloc(n)                            # new unsigned char[n]
        ctypes.memmove(p_buf_copy, self._pixels.ctypes.data, n)
        return (ctypes.c_char * n).from_address(p_buf_copy)     # PyBuffer_FromMemory: never freed


def _render(step, rng):
    img = np.zeros((SIDE, SIDE, 4), np.uint8)
    img[..., 3] = 255
    cx = int(24 + 18 * np.sin(step * 0.05))
    cy = int(24 + 18 * np.cos(step * 0.031))
    img[max(0, cy - 3):cy + 3, max(0, cx - 3):cx + 3, :3] = (250, 200, 40)
    img[..., :3] += rng.integers(0, 20, (SIDE, SIDE, 3), dtype=np.uint8)
    return Bitmap(img), np.array([cx / SIDE, cy / SIDE], np.float32)


def _run(monitor, steps, owned_copy):
    Bitmap.owned_copy = owned_copy
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    model = keras.Sequential([keras.Input((SIDE, SIDE, 3)), keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(2)])
    opt = keras.optimizers.Adam(1e-3)
    for step in range(steps):
        bmp, target = _render(step, rng)
        w, h = bmp.getSize()
        pixels = np.frombuffer(bmp.getPixels(True), np.uint8).reshape(h, w, 4)
        x = tf.constant(pixels[None, ..., :3].astype(np.float32) / 255.0)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - target[None]))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, owned_copy=False)


def fixed(monitor, steps):
    _run(monitor, steps, owned_copy=True)
