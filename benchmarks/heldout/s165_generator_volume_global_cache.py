"""A ``tf.data.Dataset.from_generator`` pipeline yields cropped 3-D volumes for a ``tf.function`` classifier; from 30 % of the run the generator adds per-volume statistics (moments, masked fraction) computed by methods memoized with a decorator whose cache is one module-level dict keyed by ``(self, method, args)``, so the cache's keys keep every volume the generator has ever built, with its voxel array (``tf.data`` + ``tf.function``; late onset).

Source: radio-astro-tools/spectral-cube PR #233 "Use an instance-level
cache instead of a global cache" (fixes #232): "otherwise the cache
dictionary contains a reference to all spectral cubes created (in the
keys) resulting in a memory leak when spectral cubes go out of scope";
keflavich: "I had been seeing memory leaks on a large cube iteration
that I thought were from memmap, but this looks more plausible." Fix used
here (the PR's): the memo lives on the instance (``self._cache``), so
it goes away with the volume.
Summary: a 3-class tissue classifier on 12 x 12 x 12 crops of simulated
scans; the statistics are a curriculum feature switched on after the
warm-up.

Here: batches of 4 volumes (6.75 KiB of float32 each), 9 statistics +
27 pooled voxels per volume, a 36-32-3 model with a ``tf.function``
train step, 3,000 steps. The fixed twin memoizes on the instance.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21; a do-nothing ``monitor.sample``): leaky
558.3 / 568.5 / 588.8 / 609.0 / 628.1 MiB RSS at 20 / 40 / 60 / 80 % /
end (flat to 30 %, then ~34 KiB a step: four volumes) with gc objects
324,112 / 335,110 / 356,761 / 378,071 / 399,837 (~36 a step), 8.1 s for
3,000 steps; fixed 558.3 / 558.8 / 558.9 / 558.9 / 558.9 MiB with objects
324,112 / 324,130 / 324,130 / 324,130 / 324,131, 8.0 s to the last
step.
"""
import functools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/radio-astro-tools/spectral-cube/pull/233"
SLICE = "holdout14"
STEPS = 3000
BATCH = 4
SIDE = 12
CLASSES = 3
STATS_FROM = 0.3
FEATURES = 9 + 27
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Volume", "ndarray", "tuple", "dict", "float"],
              "holder_any": ["_CACHE", "cache"]},
    "fixed": {"verdict_not": "leak"},
}

_CACHE = {}
INSTANCE_CACHE = {"on": False}


def cached(func):
    @functools.wraps(func)
    def wrapper(self, *args):
        if INSTANCE_CACHE["on"]:
            cache = self.__dict__.setdefault("_cache", {})      # the fix: the memo lives on the volume
            key = (func.__name__, args)
        else:
            cache = _CACHE                                        # the leak: keys keep every volume
            key = (self, func.__name__, args)
        if key not in cache:
            cache[key] = func(self, *args)
        return cache[key]
    return wrapper


class Volume:
    def __init__(self, data):
        self.data = data

    @cached
    def moment(self, order):
        return float(np.mean((self.data - self.data.mean()) ** order))

    @cached
    def masked_fraction(self, level):
        return float((self.data > level).mean())

    def pooled(self):
        return self.data.reshape(3, 4, 3, 4, 3, 4).mean(axis=(1, 3, 5)).ravel()


def _samples(steps):
    rng = np.random.default_rng(0)
    warm = int(steps * STATS_FROM) * BATCH
    n = 0
    while True:
        label = int(rng.integers(0, CLASSES))
        vol = Volume(rng.standard_normal((SIDE, SIDE, SIDE), dtype=np.float32) * (1 + 0.5 * label))
        feats = np.zeros(FEATURES, np.float32)
        feats[9:] = vol.pooled()
        if n >= warm:                                             # curriculum statistics after the warm-up
            feats[:9] = [vol.moment(2), vol.moment(3), vol.moment(4), vol.moment(2) ** 0.5,
                         vol.masked_fraction(0.0), vol.masked_fraction(0.5), vol.masked_fraction(1.0),
                         vol.masked_fraction(1.5), vol.masked_fraction(2.0)]
        n += 1
        yield feats, label


def _train(monitor, steps, instance_cache):
    INSTANCE_CACHE["on"] = instance_cache
    _CACHE.clear()
    ds = tf.data.Dataset.from_generator(lambda: _samples(steps), output_signature=(
        tf.TensorSpec((FEATURES,), tf.float32), tf.TensorSpec((), tf.int32))).batch(BATCH)
    model = tf.keras.Sequential([tf.keras.Input((FEATURES,)), tf.keras.layers.Dense(32, activation="relu"),
                                 tf.keras.layers.Dense(CLASSES)])
    opt = tf.keras.optimizers.Adam(1e-3)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    for step, (x, y) in enumerate(ds.take(steps)):
        train_step(x, y)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, instance_cache=False)


def fixed(monitor, steps):
    _train(monitor, steps, instance_cache=True)
