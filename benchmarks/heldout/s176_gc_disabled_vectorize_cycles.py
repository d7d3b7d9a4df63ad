"""A self-supervised training script calls ``gc.disable()`` before its loop to avoid collector pauses, as DINOv3's ``train.py`` does; its colour augmentation builds a jitter object per batch whose lookup table is computed with ``np.vectorize(self._curve, otypes=[np.float32])``, and a vectorized bound method is a reference cycle (the object -> its ``vectorize`` -> the bound method, also behind the ``vectorize``'s cached ufunc -> the object), so with the collector off every batch's jitter object, and the augmented crops it keeps for logging, is never freed (``tf.function`` + numpy; the fixed twin saw-tooths).

Source: facebookresearch/dinov3 issue #150 "Garbage Collector" ("I
noticed that ``gc.disable()`` is called in ``train.py`` ... host RAM
steadily increases during training until a DataLoader worker is killed
(OOM). Removing that one line stops the memory creep"; it proposes to
"keep GC enabled and do a light periodic ``gc.collect()`` (e.g., every N
steps)"), and numpy/numpy issue #11867 "Unbounded memory use when
specifying otypes='d' in vectorize" (``np.vectorize`` of a bound method:
"the issue is that ``self._ufunc`` becomes a circular reference when the
function being vectorized is a class method", collectable only by the
cyclic collector). Fix used here (the issue's proposal): the collector
stays disabled but the loop calls ``gc.collect()`` every 100 steps.
Summary: a two-layer conv encoder trained on 8 x 24 x 24 x 3 crops with a
``tf.function`` step (a rotation-prediction pretext task); each batch gets
a brightness/gamma jitter whose 256-level curve is vectorized.

Here: 3,000 steps, the jitter object keeps its batch (~54 KiB). The
fixed twin collects every 100 steps.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21; a do-nothing ``monitor.sample``): leaky
603.3 / 636.1 / 668.9 / 701.8 / 734.7 MiB RSS at 20 / 40 / 60 / 80 % /
end (~56 KiB a step: the jitter object, its ``vectorize`` and the crops)
with gc objects 322,588 / 328,589 / 334,590 / 340,591 / 346,592 (10 a
step), 11.8 s for 3,000 steps (~4 ms a step); fixed 576.1 / 578.5 / 578.5
/ 578.5 / 578.6 MiB with objects 316,270 at every mark (the marks fall
right after a collection; in between up to ~1,000 objects and ~5.5 MiB of
cyclic garbage build up, and the allocator reuses that memory after each
collection), 10.3 s.
"""
import gc
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/facebookresearch/dinov3/issues/150"
SLICE = "holdout15"
STEPS = 3000
BATCH = 8
SIDE = 24
COLLECT_EVERY = 100
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ColorJitter", "vectorize", "method", "ndarray", "dict"]},
    "fixed": {"verdict_not": "leak"},
}


class ColorJitter:
    def __init__(self, rng, batch):
        self.gamma = float(rng.uniform(0.7, 1.4))
        self.gain = float(rng.uniform(0.8, 1.2))
        self.batch = batch                                    # kept for the augmentation log
        self.curve = np.vectorize(self._curve, otypes=[np.float32])   # bound method: a cycle

    def _curve(self, level):
        return min(1.0, self.gain * (level / 255.0) ** self.gamma)

    def __call__(self):
        lut = self.curve(np.arange(256, dtype=np.float32))
        codes = np.clip(self.batch * 255.0, 0, 255).astype(np.uint8)
        return lut[codes]


def _train(monitor, steps, periodic_collect):
    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    conv1 = tf.Variable(tf.random.normal((3, 3, 3, 16), stddev=0.2))
    conv2 = tf.Variable(tf.random.normal((3, 3, 16, 32), stddev=0.1))
    head = tf.Variable(tf.random.normal((32, 4), stddev=0.1))
    opt = tf.keras.optimizers.SGD(0.05)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.nn.conv2d(x, conv1, 2, "SAME"))
            h = tf.nn.relu(tf.nn.conv2d(h, conv2, 2, "SAME"))
            logits = tf.reduce_mean(h, axis=(1, 2)) @ head
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        grads = tape.gradient(loss, [conv1, conv2, head])
        opt.apply_gradients(zip(grads, [conv1, conv2, head]))
        return loss

    gc.disable()                                              # as in the report: no collector pauses
    try:
        for step in range(steps):
            base = rng.random((BATCH, SIDE, SIDE, 3), dtype=np.float32)
            k = rng.integers(0, 4, BATCH)
            crops = np.stack([np.rot90(b, int(r)) for b, r in zip(base, k)])
            x = ColorJitter(rng, crops)()                     # the leak: a cycle per batch, never collected
            train_step(tf.constant(x), tf.constant(k, tf.int32))
            if periodic_collect and step % COLLECT_EVERY == COLLECT_EVERY - 1:
                gc.collect()                                  # the fix: a light periodic collection
            monitor.sample(step)
    finally:
        gc.enable()


def leaky(monitor, steps):
    _train(monitor, steps, periodic_collect=False)


def fixed(monitor, steps):
    _train(monitor, steps, periodic_collect=True)
