"""A ``model.fit`` run ships an encrypted telemetry record after every batch (loss, learning rate, timings and a digest of the batch) through an XXTEA binding written like xxtea-python before issue #5 was fixed: the C ``xxtea_encrypt`` returns a ``malloc``'d buffer, the wrapper copies it out of ``ffi.buffer(out, out_len)`` into ``bytes`` and never frees the C data, so every batch leaves its ciphertext (~1.1 KiB) in the C heap (``model.fit`` + ``LeakCallback``; small and native memory only, no Python object grows).

Source: xxtea/xxtea-python issue #5 "Memory leak" (closed): "Severe memory
leak. The returned ffi.buffer is never freed. The c data is not managed by
ffi. You need to free it manually." Maintainer: "Thank you." Fix used
here (the issue's): the wrapper calls ``free`` on the returned pointer once its bytes
are copied, so each ciphertext is allocated and released (allocator churn,
no growth).
Summary: the binding is a stand-in with xxtea-python's shape
(``encrypt(data, key)`` calling a C function that returns a pointer and a
length); the "C side" is a ``ctypes`` ``malloc`` of the padded length into
which the ciphertext (an XXTEA-style round mix done in numpy on 32-bit
words) is copied, read back with ``ctypes.string_at`` as ``ffi.buffer``
would be. A Keras callback builds a ~1.1 KiB JSON telemetry record at the end
of every batch, encrypts it and hands it to a bounded outbox (a deque of
32 records, sent and cleared every 32 batches). The model is a Keras
64-128-64-6 classifier trained with Adam on batches of 64.

Here: 6,000 batches (60 epochs of 100). The fixed binding frees the C buffer.
"""
import collections
import ctypes
import ctypes.util
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/xxtea/xxtea-python/issues/5"
SLICE = "holdout24"
STEPS = 6000            # batches; 100 per epoch, 60 epochs
PER_EPOCH = 100
BATCH = 64
FEATURES = 64
CLASSES = 6
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "malloc", "heap", "unexplained"]},
    "fixed": {"verdict_not": "leak"},
}

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]

_DELTA = np.uint32(0x9E3779B9)


def _c_xxtea_encrypt(data, key_words):
    """The "C" function: returns (pointer, length) of a malloc'd ciphertext."""
    n = (len(data) + 3) // 4 + 1
    v = np.zeros(n, np.uint32)
    v.view(np.uint8)[:len(data)] = np.frombuffer(data, np.uint8)
    v[-1] = len(data)
    s = np.uint32(0)
    with np.errstate(over="ignore"):
        for _ in range(6):
            s = np.uint32(s + _DELTA)
            z = np.roll(v, 1)
            y = np.roll(v, -1)
            mx = (((z >> np.uint32(5)) ^ (y << np.uint32(2))) + ((y >> np.uint32(3)) ^ (z << np.uint32(4)))) ^ \
                 ((s ^ y) + (key_words[np.arange(n) & 3] ^ z))
            v = v + mx
    out = v.tobytes()
    ptr = _libc.malloc(len(out))
    ctypes.memmove(ptr, out, len(out))
    return ptr, len(out)


class XXTEA:
    """xxtea-python-like wrapper."""

    def __init__(self, free_result):
        self.free_result = free_result

    def encrypt(self, data, key):
        key_words = np.frombuffer(key.ljust(16, b"\0")[:16], np.uint32)
        ptr, out_len = _c_xxtea_encrypt(data, key_words)
        result = ctypes.string_at(ptr, out_len)           # ffi.buffer(out, out_len[0])[:]
        if self.free_result:
            _libc.free(ptr)                                # the fix: the C data is freed
        return result


class EncryptedTelemetry(keras.callbacks.Callback):
    def __init__(self, cipher):
        super().__init__()
        self.cipher = cipher
        self.outbox = collections.deque(maxlen=32)
        self.sent = 0
        self.t0 = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        logs = logs or {}
        record = {"run": "fit-telemetry-7f3a", "batch": int(batch), "loss": round(float(logs.get("loss", 0.0)), 6),
                  "lr": 1e-3, "batch_ms": round((now - self.t0) * 1e3, 3), "host": "trainer-03",
                  "shard": "gs://runs/train/part-%05d.tfrecord" % (batch % 211),
                  "hist": [round(float(v), 4) for v in np.sin(np.arange(96) * (batch + 1) * 0.01)],
                  "tags": ["fit", "keras", "cpu", "telemetry", "encrypted"] * 4}
        self.t0 = now
        self.outbox.append(self.cipher.encrypt(json.dumps(record).encode(), b"telemetry-key-01"))
        if len(self.outbox) == self.outbox.maxlen:
            self.sent += len(self.outbox)
            self.outbox.clear()


def _fit(logdir, steps, free_result):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, PER_EPOCH * BATCH)
    x = (centers[y] + 1.5 * rng.standard_normal((len(y), FEATURES))).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(CLASSES)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y.astype(np.int32), batch_size=BATCH, epochs=max(1, steps // PER_EPOCH), verbose=0,
              shuffle=True, callbacks=[EncryptedTelemetry(XXTEA(free_result)),
                                       tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, free_result=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, free_result=True)
