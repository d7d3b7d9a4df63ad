"""A ``tf.function`` regressor learns to predict calibrated sensor voltages, and every step the loop converts the batch's raw ADC readings to millivolts with a units library, activating the converter's ``adc`` context inline (``q.to("millivolt", "adc", gain=g)``); the units library is written like pint after pull request #909, which keeps one cache overlay per combination of active contexts in ``UnitRegistry._caches`` but under a key that changes with every activation (the stand-in keys it on the context objects that ``enable_contexts`` re-creates each time), so each ``.to`` with an inline context adds a new overlay, a new units overlay and the copied contexts to the registry (tf.function; grows every step, ~2.1 KiB a step).

Source: hgrecco/pint pull request #923 "Preserve caches on context switch
v2": "Fix bug in #909 where, every time a context is reactivated, it
creates a brand new entry in UnitRegistry._caches - thus not only
nullifying the whole point of the PR, but also creating a nasty memory leak
for users that invoke ``.to`` with an inline context many times." Fix used
here (the PR's): the cache key is the active context chain's
``hashable()`` value (each context's name, transformations, defaults and
redefinitions), so reactivating the same context with the same arguments
finds its overlay again.
Summary: a small stand-in for pint's context registry (``UnitRegistry`` with
``_caches`` and ``_context_units``, ``Context.from_context``, a
``ContextChain`` with ``hashable()``, ``ContextCacheOverlay`` and
``UnitDefinition``; the ``adc`` context redefines three units and carries a
gain transformation with a ``gain`` default). Each step draws a batch of 64
sensor rows (12 features) from one of four gain channels, converts its raw
counts to millivolts with ``Q_(counts, "lsb").to("millivolt", "adc",
gain=g)`` as targets, and takes a ``tf.function`` Adam step of a 12-64-64-1
MLP. In the fixed registry the four gain settings fill four overlays during
the first steps and then reuse them.

Here: 18,000 steps. The fixed registry keys ``_caches`` on
``self._active_ctx.hashable()``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS
read before each object count, at the marks only): leaky 568.5 / 576.2 /
583.9 / 591.0 / 598.3 MiB RSS at 20 / 40 / 60 / 80 % / end (558.6 MiB at
the first step; ~2.1 KiB a step: a ``ContextCacheOverlay`` with its two
filled dicts, a units overlay with three ``UnitDefinition`` objects and the
copied ``Context`` that keys them) with gc objects 325,396 at the first
step, then 361,468 / 401,077 / 440,677 / 471,629 / 511,229 at the same
marks (~10 a step), 11.8 s for 18,000 steps (~0.66 ms a step); fixed 562.2
/ 562.5 / 562.5 / 562.5 / 562.5 MiB with objects 325,944 / 325,452 /
325,492 / 325,532 / 325,572 (four overlays, filled in the first four
steps), 10.9 s. 14-15 s a variant in its process, imports included.
"""
import contextlib
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/hgrecco/pint/pull/923"
SLICE = "holdout20"
STEPS = 18000
BATCH = 64
FEATURES = 12
GAINS = (1, 2, 4, 8)
EXPECT = {
    "leaky": {"verdict": "leak",
              "culprit_any": ["ContextCacheOverlay", "Context", "UnitDefinition", "dict"],
              "holder_any": ["_caches", "_context_units", "UnitRegistry", "ureg"]},
    "fixed": {"verdict_not": "leak"},
}


class UnitDefinition:
    __slots__ = ("name", "symbol", "aliases", "reference", "scale")

    def __init__(self, name, symbol, aliases, reference, scale):
        self.name, self.symbol, self.aliases = name, symbol, aliases
        self.reference, self.scale = reference, scale


class Context:
    def __init__(self, name, defaults=None):
        self.name = name
        self.defaults = dict(defaults or {})
        self.redefinitions = []
        self.funcs = {}
        self.relation_to_context = {}

    def redefine(self, name, reference, scale):
        self.redefinitions.append((name, reference, scale))

    def add_transformation(self, src, dst, func):
        self.funcs[(src, dst)] = func
        self.relation_to_context[(src, dst)] = self

    @classmethod
    def from_context(cls, context, **defaults):
        new = cls(context.name, dict(context.defaults, **defaults))
        new.redefinitions = list(context.redefinitions)
        new.funcs = dict(context.funcs)
        new.relation_to_context = {k: new for k in new.funcs}
        return new

    def hashable(self):
        return (self.name, tuple(self.funcs), frozenset(self.defaults.items()), tuple(self.redefinitions))


class ContextChain:
    def __init__(self):
        self.contexts = []

    def insert_contexts(self, *contexts):
        self.contexts = list(reversed(contexts)) + self.contexts

    def remove_contexts(self, n):
        del self.contexts[:n]

    def hashable(self):
        return tuple(ctx.hashable() for ctx in self.contexts)


class ContextCacheOverlay:
    def __init__(self, registry_cache):
        self.dimensionality = registry_cache.dimensionality
        self.parse_unit = registry_cache.parse_unit
        self.root_units = {}
        self.conversion_factor = {}


class RegistryCache:
    def __init__(self):
        self.dimensionality = {}
        self.parse_unit = {}
        self.root_units = {}
        self.conversion_factor = {}


class UnitRegistry:
    def __init__(self, hashable_key):
        self.hashable_key = hashable_key
        self._units = {
            "volt": UnitDefinition("volt", "V", (), "volt", 1.0),
            "millivolt": UnitDefinition("millivolt", "mV", (), "volt", 1e-3),
            "lsb": UnitDefinition("lsb", "LSB", ("count",), "volt", 1.0e-4),
            "fullscale": UnitDefinition("fullscale", "FS", (), "volt", 3.3),
            "offset_step": UnitDefinition("offset_step", "OS", (), "volt", 2.0e-3),
        }
        self._contexts = {}
        self._active_ctx = ContextChain()
        self._cache = RegistryCache()
        self._caches = {(): self._cache}
        self._context_units = {}
        self._overlay = {}

    def add_context(self, context):
        self._contexts[context.name] = context

    def _switch_context_cache_and_units(self):
        self._overlay = {}
        if not any(ctx.redefinitions for ctx in self._active_ctx.contexts):
            self._cache = self._caches[()]
            return
        if self.hashable_key:                                # the fix (pint #923)
            key = self._active_ctx.hashable()
        else:                                                # after #909: the re-created context objects
            key = tuple(self._active_ctx.contexts)
        if key in self._caches:
            self._cache = self._caches[key]
            self._overlay = self._context_units[key]
            return
        self._caches[key] = self._cache = ContextCacheOverlay(self._caches[()])
        self._context_units[key] = self._overlay = {}
        for ctx in reversed(self._active_ctx.contexts):
            for name, reference, scale in ctx.redefinitions:
                base = self._units[name]
                self._overlay[name] = UnitDefinition(base.name, base.symbol, base.aliases, reference, scale)

    def enable_contexts(self, *names, **kwargs):
        contexts = tuple(Context.from_context(self._contexts[n], **kwargs) for n in names)
        self._active_ctx.insert_contexts(*contexts)
        self._switch_context_cache_and_units()

    def disable_contexts(self, n):
        self._active_ctx.remove_contexts(n)
        self._switch_context_cache_and_units()

    @contextlib.contextmanager
    def context(self, *names, **kwargs):
        self.enable_contexts(*names, **kwargs)
        try:
            yield self
        finally:
            self.disable_contexts(len(names))

    def _root_scale(self, unit):
        cache = self._cache.root_units
        if unit not in cache:
            definition = self._overlay.get(unit) or self._units[unit]
            cache[unit] = definition.scale
        return cache[unit]

    def convert(self, value, src, dst):
        factor = self._cache.conversion_factor.get((src, dst))
        if factor is None:
            factor = self._root_scale(src) / self._root_scale(dst)
            self._cache.conversion_factor[(src, dst)] = factor
        for ctx in self._active_ctx.contexts:
            func = ctx.funcs.get(("counts", "voltage"))
            if func is not None:
                value = func(value, **ctx.defaults)
        return value * factor

    def Quantity(self, value, unit):
        return Quantity(self, value, unit)


class Quantity:
    def __init__(self, registry, magnitude, units):
        self._registry, self.magnitude, self.units = registry, magnitude, units

    def to(self, dst, *contexts, **ctx_kwargs):
        reg = self._registry
        if contexts:
            with reg.context(*contexts, **ctx_kwargs):
                return Quantity(reg, reg.convert(self.magnitude, self.units, dst), dst)
        return Quantity(reg, reg.convert(self.magnitude, self.units, dst), dst)


def _make_registry(hashable_key):
    ureg = UnitRegistry(hashable_key)
    adc = Context("adc", defaults={"gain": 1})
    adc.redefine("lsb", "volt", 1.25e-4)                     # the 12-bit ADC's step on this board
    adc.redefine("fullscale", "volt", 5.12)
    adc.redefine("offset_step", "volt", 2.5e-3)
    adc.add_transformation("counts", "voltage", lambda value, gain: value / gain)
    ureg.add_context(adc)
    return ureg


def _train(monitor, steps, hashable_key):
    keras.utils.set_random_seed(0)
    ureg = _make_registry(hashable_key)
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(FEATURES).astype(np.float32)
    x_pool = rng.standard_normal((4096, FEATURES)).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    opt = keras.optimizers.Adam(1e-3)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True)[:, 0] - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for step in range(steps):
        i = (step * BATCH) % 4096
        x = x_pool[i:i + BATCH]
        gain = GAINS[step % len(GAINS)]
        counts = np.clip(2048 + 600 * np.tanh(x @ w_true) * gain, 0, 4095)
        target = ureg.Quantity(counts, "lsb").to("millivolt", "adc", gain=gain).magnitude
        train_step(x, tf.constant(target.astype(np.float32)))
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, hashable_key=False)


def fixed(monitor, steps):
    _train(monitor, steps, hashable_key=True)
