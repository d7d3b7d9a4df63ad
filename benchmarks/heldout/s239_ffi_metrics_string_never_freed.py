"""A ``tf.function`` trainer decides its augmentations per step from feature flags evaluated by a native feature-flag engine through ctypes, and hands the engine's usage metrics to its reporter every few steps; as in Unleash's Yggdrasil Python engine before its fix, the binding declares the metrics call's ``restype`` as ``ctypes.c_char_p``, so ctypes copies the engine-allocated JSON string into a Python ``bytes`` and drops the pointer, and the native string is never handed back to the engine to free (tf.function; native only: the leaked strings have no Python object, gc counts flat; grows every 4 steps, ~2.6 KiB a step on average).

Source: Unleash/yggdrasil pull request #258 "fix(python): memory leak in
metrics": "Fixes a leak in the metrics handling for the Python engine. This
was caused by the incorrect return type on the FFI function on the Python
side" (the Ruby engine had the same bug, #259; krypton-byte/neonize#186
describes the mechanism: "With ``restype = c_char_p``, ctypes builds a
Python ``bytes`` from the returned ``*C.char`` and the original pointer is
no longer reachable, so it can never be freed. Freeing requires keeping the
raw pointer — i.e. ``restype = c_void_p``"). Fix used here (the PR's): the
metrics call returns ``c_void_p``; the binding copies the string with
``ctypes.string_at`` and frees it with the engine's free function.
Summary: a small 3-conv classifier (8-8-16 filters) on 12x12x3 synthetic images,
batches of 64, Adam, a ``tf.function`` train step; before each step the
engine evaluates three flags for the run's context ("trainer.mixup",
"trainer.label_smoothing", "trainer.cutout", with gradual-rollout
stickiness on the step) and counts them per flag and variant; every 4
steps the reporter pulls the engine's metrics bucket (100 toggles with their
yes/no counts and variant counts, ~10 KB of JSON) and resets it. The engine
is a stand-in: its native side allocates the JSON with libc's ``strdup``
through ctypes (as the Rust side hands out a ``CString``), and the binding
declares ``restype`` exactly as the Python engine did.

Here: 7,000 steps. The fixed binding declares ``c_void_p`` and frees the
string after copying it.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS
read before each object count, at the marks only): leaky 572.6 / 575.8 /
579.4 / 582.9 / 586.4 MiB RSS at 20 / 40 / 60 / 80 % / end (568.7 MiB at
the first step; ~2.6 KiB a step: one ~10 KB metrics string every 4 steps,
left allocated) with gc objects 329,691 at the first step, then 329,364 /
329,365 / 329,366 / 329,367 / 329,368 at the same marks (flat), 26.0 s for
7,000 steps (~3.7 ms a step); fixed 572.5 / 573.5 / 573.5 / 573.5 / 573.5
MiB with the same object counts, 27.9 s. 29-32 s a variant in its process,
imports included.
"""
import collections
import ctypes
import ctypes.util
import json
import os
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/Unleash/yggdrasil/pull/258"
SLICE = "holdout20"
STEPS = 7000
BATCH = 64
CLASSES = 10
METRICS_EVERY = 4
TOGGLES = 100
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native"]},
    "fixed": {"verdict_not": "leak"},
}

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


class NativeEngine:
    """Stand-in for the Yggdrasil engine behind the Python binding (its native strings come from strdup)."""

    def __init__(self, fixed_binding):
        self.fixed_binding = fixed_binding
        self._strdup = _libc.strdup                          # the engine call that returns a native string
        self._strdup.argtypes = [ctypes.c_char_p]
        # the bug: c_char_p turns the result into bytes and the pointer is lost
        self._strdup.restype = ctypes.c_void_p if fixed_binding else ctypes.c_char_p
        self._free = _libc.free                              # stands for the engine's free_response
        self._free.argtypes = [ctypes.c_void_p]
        self._free.restype = None
        self.toggles = {"trainer.mixup": 50, "trainer.label_smoothing": 30, "trainer.cutout": 20}
        for i in range(TOGGLES - len(self.toggles)):
            self.toggles["service.flag-%02d" % i] = (i * 7) % 100
        self.bucket = {name: {"yes": 0, "no": 0, "variants": collections.Counter()} for name in self.toggles}
        self.start = 0

    def is_enabled(self, name, context):
        rollout = self.toggles[name]
        enabled = zlib.crc32(("%s:%s" % (name, context["step"])).encode()) % 100 < rollout
        entry = self.bucket[name]
        entry["yes" if enabled else "no"] += 1
        entry["variants"]["on" if enabled else "disabled"] += 1
        return enabled

    def get_metrics(self, step):
        payload = json.dumps({"start": self.start, "stop": step, "toggles": {
            name: {"yes": e["yes"], "no": e["no"], "variants": dict(e["variants"]),
                   "appName": "trainer", "environment": "research"} for name, e in self.bucket.items()}})
        for entry in self.bucket.values():                   # the bucket is reset on each pull
            entry["yes"] = entry["no"] = 0
            entry["variants"].clear()
        self.start = step
        result = self._strdup(payload.encode())              # the native side hands out its string
        if self.fixed_binding:                               # the fix (yggdrasil#258): keep the pointer, free it
            text = ctypes.string_at(result)
            self._free(result)
            return json.loads(text)
        return json.loads(result)                            # bytes copy; the native string is never freed


def _train(monitor, steps, fixed_binding):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    protos = rng.random((CLASSES, 12, 12, 3)).astype(np.float32)
    model = keras.Sequential([keras.Input((12, 12, 3)),
                              keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
                              keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
                              keras.layers.MaxPooling2D(),
                              keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
                              keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(CLASSES)])
    opt = keras.optimizers.Adam(1e-3)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(y, logits))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    engine = NativeEngine(fixed_binding)
    reported = []
    for step in range(steps):
        context = {"appName": "trainer", "environment": "research", "step": step}
        labels = rng.integers(0, CLASSES, BATCH)
        x = protos[labels] + 0.25 * rng.standard_normal((BATCH, 12, 12, 3)).astype(np.float32)
        y = np.eye(CLASSES, dtype=np.float32)[labels]
        if engine.is_enabled("trainer.label_smoothing", context):
            y = y * 0.9 + 0.1 / CLASSES
        if engine.is_enabled("trainer.mixup", context):
            perm = rng.permutation(BATCH)
            lam = np.float32(rng.beta(0.4, 0.4))
            x = lam * x + (1 - lam) * x[perm]
            y = lam * y + (1 - lam) * y[perm]
        if engine.is_enabled("trainer.cutout", context):
            r, c = rng.integers(0, 8, 2)
            x[:, r:r + 4, c:c + 4, :] = 0.0
        train_step(tf.constant(x), tf.constant(y))
        if (step + 1) % METRICS_EVERY == 0:
            metrics = engine.get_metrics(step + 1)
            reported.append(metrics["toggles"]["trainer.mixup"]["yes"])
            del reported[:-100]
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, fixed_binding=False)


def fixed(monitor, steps):
    _train(monitor, steps, fixed_binding=True)
