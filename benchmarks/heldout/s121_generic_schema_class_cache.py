"""Each batch's records are validated through a parametrized schema class, ``Record[spec]``, built on demand and cached in a module-level dict keyed by the parameters; the feature spec includes the batch's padded length and source id, so almost every batch creates a new class that the cache keeps for the rest of the run (eager ``tf.data``-free loop with a ``tf.function`` step).

Source: pydantic/pydantic#6681 "Use WeakValueDictionary to fix generic
memory leak" (parametrized generic models were cached in a plain dict,
``_GENERIC_TYPES_CACHE``, so every new parametrization lived forever;
"the issues to me seem two different sources of possible leaks", the
second being ``__pydantic_parent_namespace__``), and the related
openai/openai-python#3084 (a new parametrization and validator built on
every ``parse()`` call). Fix, from #6681: the cache holds its classes
weakly (``weakref.WeakValueDictionary``), so a parametrization dies with
the last object that uses it.
Summary: a small schema library gives ``Record.__class_getitem__``: each
new ``Record[(length, source, dtype)]`` builds a subclass with its own
field tuple, validator table and ``__slots__``, and stores it in
``_GENERIC_TYPES_CACHE``. The data loop validates each batch as
``Record[(padded_len, source_id, "float32")]``; lengths vary per batch and
each shard has its own source id, so parametrizations rarely repeat and
each leaves a class (with its dict, MRO tuple, validator functions) in
the module-level cache.

Here: batches of 32 sequences padded to 8-64 steps of 8 features, mean
pooled and fed to a Keras 8-64-10 classifier through a ``tf.function``
step; a new source id every 10 batches. The fixed twin caches classes
weakly.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; a do-nothing ``monitor.sample``): leaky
577.7 / 595.9 / 650.5 MiB RSS at 20 % / 40 % / end (~4.6 KiB a step) and
gc objects 355,262 / 388,589 / 488,732 (+8.3 a step: the class, its dict,
MRO tuple, two validator closures and their cells), fixed 561.7 / 563.5 /
564.5 MiB with objects flat (322,446); ~0.55 ms a step (11.3 s leaky,
10.7 s fixed for 20,000 steps).
"""
import os
import weakref

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/pydantic/pydantic/pull/6681"
SLICE = "holdout10"
STEPS = 20000
BATCH = 32
FEATURES = 8
CLASSES = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["type", "Record", "function", "dict", "tuple", "getset_descriptor"],
              "holder_any": ["_GENERIC_TYPES_CACHE", "Record"]},
    "fixed": {"verdict_not": "leak"},
}

_GENERIC_TYPES_CACHE = {}
_WEAK = False


class Record:
    __slots__ = ("data",)
    fields = ()

    def __class_getitem__(cls, params):
        cached = _GENERIC_TYPES_CACHE.get((cls, params))
        if cached is not None:
            return cached
        length, source, dtype = params
        fields = tuple("t%02d" % i for i in range(length))

        def _check_shape(value, _len=length):
            if value.shape[1] != _len:
                raise ValueError("expected %d steps" % _len)
            return value

        def _check_dtype(value, _dtype=dtype):
            if value.dtype != np.dtype(_dtype):
                raise TypeError("expected %s" % _dtype)
            return value

        sub = type("Record[%d,%s,%s]" % params, (cls,), {
            "__slots__": (),
            "fields": fields,
            "source": source,
            "validators": (_check_shape, _check_dtype),
            "__doc__": "Record of %d steps from %s" % (length, source),
        })
        _GENERIC_TYPES_CACHE[(cls, params)] = sub
        return sub

    def __init__(self, data):
        for check in self.validators:
            data = check(data)
        self.data = data


def _train(monitor, steps, weak):
    global _GENERIC_TYPES_CACHE
    _GENERIC_TYPES_CACHE = weakref.WeakValueDictionary() if weak else {}    # the fix: weak values
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for step in range(steps):
        source = "shard-%05d" % (step // 10)
        length = int(rng.integers(8, 65))
        y = rng.integers(0, CLASSES, BATCH).astype(np.int32)
        seq = centers[y][:, None, :] + rng.standard_normal((BATCH, length, FEATURES), dtype=np.float32)
        record = Record[(length, source, "float32")](seq)
        train_step(record.data.mean(1), y)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, weak=False)


def fixed(monitor, steps):
    _train(monitor, steps, weak=True)
