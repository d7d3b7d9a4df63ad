"""A ``PyDataset``'s augmentation kernels go through a small specialising dispatcher that keys its cache on argument "type fingerprints"; for arguments it cannot fingerprint (a dict of augmentation settings, passed once the curriculum starts at 40 % of the epochs) it computes a type object and appends it to a keep-alive list on every call, so the list gains a few objects each batch for the rest of the run (``model.fit``; late onset, small leak).

Source: numba/numba#9757 "Fix some memory leaks/poor memory behaviour"
(fixes #9733: "in the dispatcher, the use of the ``typeof_pyval``
method, as occurs in the case of a type which cannot be fingerprinted,
appends the result of computing the type to a list so as to keep a
reference alive. This append is unconditional, therefore every dispatch
adds to the list. The fix is to make this a ``set`` such that
references are held, but only once, and memory use does not grow with
each invocation of the dispatcher with a non-fingerprintable type").
Fix, as in the PR: hold the computed types in a set (here a dict keyed
by the type's key), once each.
Summary: a ``PyDataset`` builds each batch with two dispatched kernels,
``jitter`` and ``mixup``. ``Dispatcher.__call__`` fingerprints arrays
(dtype, ndim) and scalars cheaply; a ``dict`` argument falls back to
``typeof()``, which builds a ``DictType`` (a frozenset of the key/value
type pairs) and appends it to ``self._keepalive``. For the first 40 %
of the epochs the settings are plain floats; afterwards the curriculum
passes ``{"strength": s, "p": p}`` and every call leaves a new
``DictType`` (an object, its frozenset and tuples, ~0.8 KiB) behind: two
a batch.

Here: 32 features, a 32-64-6 Keras MLP, batches of 32, 50 batches an
epoch, 160 epochs. The fixed twin's dispatcher keeps ``self._types`` as
a dict keyed by the type's key.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21
/ Keras 3.15 / Python 3.11; ``LeakCallback`` replaced by a stub
callback): leaky 564.0 / 564.7 / 572.1 MiB RSS at 20 % / 40 % / end (the
onset is at 40 % of the epochs: ~1.6 KiB a batch afterwards) with gc
objects 327,557 / 328,362 / 361,269 (~7 a batch); fixed 564.5 / 564.6 /
564.7 MiB, objects 327,556 / 327,580 / 327,580; ~2 ms a batch (17.9 s
leaky, 14.4 s fixed for 8,000 batches).
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/numba/numba/pull/9757"
SLICE = "holdout11"
STEPS = 8000           # batches; 50 per epoch, 160 epochs
STEPS_PER_EPOCH = 50
CURRICULUM_FROM = 0.4
BATCH = 32
FEATURES = 32
CLASSES = 6
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["DictType", "frozenset", "tuple", "Dispatcher", "list"],
              "holder_any": ["_keepalive", "Dispatcher", "jitter", "mixup"]},
    "fixed": {"verdict_not": "leak"},
}


class DictType:
    """The computed type of a dict argument (what a JIT would specialise on)."""

    __slots__ = ("fields", "key")

    def __init__(self, fields):
        self.fields = frozenset(fields)
        self.key = ("dict", tuple(sorted(self.fields)))


def typeof(value):
    if isinstance(value, dict):
        return DictType((k, typeof(v)) for k, v in value.items())
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.ndim)
    return ("scalar", type(value).__name__)


class Dispatcher:
    def __init__(self, impl, dedupe):
        self.impl, self.dedupe = impl, dedupe
        self._specialisations = {}
        self._keepalive = []
        self._types = {}

    def _fingerprint(self, value):
        if isinstance(value, np.ndarray):
            return ("array", value.dtype.str, value.ndim)
        if not isinstance(value, dict):
            return ("object", type(value).__name__)
        t = typeof(value)                                      # cannot be fingerprinted: compute the type
        if self.dedupe:
            t = self._types.setdefault(t.key, t)               # the fix: held once per distinct type
        else:
            self._keepalive.append(t)                          # the leak: appended on every dispatch
        return t.key

    def __call__(self, *args):
        sig = tuple(self._fingerprint(a) for a in args)
        fn = self._specialisations.get(sig)
        if fn is None:
            fn = self._specialisations[sig] = self.impl       # "compile" once per signature
        return fn(*args)


def _jitter_impl(x, settings, rng_state):
    s = settings["strength"] if isinstance(settings, dict) else settings
    return x + s * rng_state.standard_normal(x.shape, dtype=np.float32)


def _mixup_impl(y_onehot, settings, rng_state):
    p = settings["p"] if isinstance(settings, dict) else settings
    lam = np.float32(1.0 - p * rng_state.random())
    return lam * y_onehot + (1.0 - lam) * y_onehot[::-1]


class CurriculumBatches(keras.utils.PyDataset):
    def __init__(self, n_batches, epochs, dedupe, **kwargs):
        super().__init__(**kwargs)
        self.n_batches, self.epochs = n_batches, epochs
        self.rng = np.random.default_rng(0)
        self.centers = self.rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
        self.jitter = Dispatcher(_jitter_impl, dedupe)
        self.mixup = Dispatcher(_mixup_impl, dedupe)
        self.epoch = 0

    def __len__(self):
        return self.n_batches

    def __getitem__(self, idx):
        y = self.rng.integers(0, CLASSES, BATCH)
        x = self.centers[y] + self.rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
        onehot = np.eye(CLASSES, dtype=np.float32)[y]
        if self.epoch < CURRICULUM_FROM * self.epochs:
            jit_cfg, mix_cfg = 0.1, 0.0                                       # plain floats: fingerprinted
        else:
            ramp = (self.epoch - CURRICULUM_FROM * self.epochs) / self.epochs
            jit_cfg = {"strength": 0.1 + 0.3 * ramp, "p": 0.5}               # dicts: typeof() per call
            mix_cfg = {"strength": 0.0, "p": 0.2 + 0.4 * ramp}
        x = self.jitter(x, jit_cfg, self.rng)
        onehot = self.mixup(onehot, mix_cfg, self.rng)
        return x, onehot

    def on_epoch_end(self):
        self.epoch += 1


def _fit(logdir, steps, dedupe):
    keras.utils.set_random_seed(0)
    epochs = max(1, steps // STEPS_PER_EPOCH)
    data = CurriculumBatches(STEPS_PER_EPOCH, epochs, dedupe)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer="adam", loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    model.fit(data, epochs=epochs, verbose=0, callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, dedupe=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, dedupe=True)
