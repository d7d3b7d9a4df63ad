"""A Keras image classifier trains with ``model.fit`` on a ``PyDataset`` that decodes WebP thumbnails with a decoder written like Pillow's ``_webp`` module before issue #586 was fixed: ``WebPDecode`` returns a ``malloc``'d pixel buffer that is copied into a ``bytes`` object with ``PyBytes_FromStringAndSize``, and for RGB images (unlike RGBA) the native buffer is never freed, so every decoded RGB thumbnail leaves its pixels in the C heap (``model.fit`` on a ``PyDataset`` + ``LeakCallback``; large and native memory only: ~36 KiB a batch, no Python object grows).

Source: python-pillow/Pillow issue #586 "webp decoder is leaking memory"
(closed): "You must also free the pixel buffer when dealing with RGB data,
just after calling PyBytes_FromStringAndSize. I have written a simple
standalone test case you can run to see the damage for yourself". Fixed by
Pillow pull request #1114 ("#1114 fixes this"; reporter: "I have tested
about a GB's pictures, and there is no longer obvious leaking."). Fix used
here (the one that closed the issue): the RGB path frees the decoded
buffer after copying it, as the RGBA path did, so each image's pixels are
allocated and released (allocator churn, no growth).
Summary: the decoder is a stand-in with ``_webp.WebPDecode``'s shape
(returns ``(bytes, width, height, mode)``); the "native" decode
``malloc``s the output buffer (``width * height * channels``), writes the
pixels (a seeded pattern per image with a class-dependent stripe), copies
it into ``bytes`` with ``ctypes.string_at`` and frees it only on the RGBA
path in the leaky build. Three quarters of the thumbnails are RGB. The
``PyDataset`` yields 100 batches an epoch of 16 decoded 32x32 thumbnails;
the model is a Keras conv net (8 filters, pooling, a 4-way head, Adam).

Here: 3,000 batches (30 epochs). The fixed decoder frees the RGB buffer too.
"""
import ctypes
import ctypes.util
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/python-pillow/Pillow/issues/586"
SLICE = "holdout24"
STEPS = 3000            # batches; 100 per epoch, 30 epochs
PER_EPOCH = 100
BATCH = 16
SIDE = 32
CLASSES = 4
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "malloc", "heap", "unexplained"]},
    "fixed": {"verdict_not": "leak"},
}

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]


class _webp:
    """Pillow ``_webp``-like module."""
    free_rgb = True

    @staticmethod
    def WebPDecode(data):
        seed = int.from_bytes(data[12:16], "little")
        mode = "RGBA" if data[16] == 1 else "RGB"
        channels = len(mode)
        n = SIDE * SIDE * channels
        out = _libc.malloc(n)                                   # WebPDecodeRGB(A)Into's buffer
        px = np.ctypeslib.as_array(ctypes.cast(out, ctypes.POINTER(ctypes.c_uint8)), (SIDE, SIDE, channels))
        yy, xx = np.mgrid[0:SIDE, 0:SIDE]
        label = seed % CLASSES
        px[..., 0] = (xx * 7 + seed) % 200
        px[..., 1] = (yy * 5 + (seed >> 3)) % 200
        px[..., 2] = 40
        px[:, label * 8:(label + 1) * 8, 2] = 250
        if channels == 4:
            px[..., 3] = 255
        pixels = ctypes.string_at(out, n)                       # PyBytes_FromStringAndSize
        if mode == "RGBA" or _webp.free_rgb:
            _libc.free(out)                                     # the fix frees the RGB buffer too
        return pixels, SIDE, SIDE, mode


class WebPThumbnails(keras.utils.PyDataset):
    def __init__(self, seed=0):
        super().__init__()
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return PER_EPOCH

    def __getitem__(self, index):
        x = np.empty((BATCH, SIDE, SIDE, 3), np.float32)
        y = np.empty(BATCH, np.int32)
        for i in range(BATCH):
            seed = int(self.rng.integers(1 << 30))
            blob = b"RIFF\x00\x00\x00\x00WEBP" + seed.to_bytes(4, "little") + bytes([int(self.rng.random() < 0.25)])
            data, w, h, mode = _webp.WebPDecode(blob)
            arr = np.frombuffer(data, np.uint8).reshape(h, w, len(mode))
            x[i] = arr[..., :3] / 255.0
            y[i] = seed % CLASSES
        return x, y


def _fit(logdir, steps, free_rgb):
    _webp.free_rgb = free_rgb
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((SIDE, SIDE, 3)), keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(CLASSES)])
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(WebPThumbnails(), epochs=max(1, steps // PER_EPOCH), verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, free_rgb=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, free_rgb=True)
