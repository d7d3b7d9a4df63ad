"""A ``PyDataset`` validates each batch's JSON records with a schema class built on the fly for that batch's optional fields (``type("RecordSchema", (Schema,), fields)``), and the schema base class registers every subclass by name in a module-level class registry, appending to the list kept under ``"RecordSchema"``, so one class (with its field objects and compiled validators) is kept per batch for the rest of the run (``model.fit``).

Source: marshmallow-code/marshmallow#732 "memory leak occurs when
creating a new type" (``MsgSchema = type('MsgSchema',
(marshmallow.Schema,), {})`` in a loop: "memory leak is very fast";
sloria: "this is because creating a new ``Schema`` class adds it to a
registry in memory"; marshmallow's ``class_registry.register`` appends
each class to ``_registry[classname]``, a list, and to the entry under
its full path). Fix used here (the thread's advice): don't build a
class per call; build one schema class per field set and reuse it (the
batches here only have 8 field sets).
Summary: training records arrive as dicts with 6 required fields and a
varying subset of 3 optional ones; ``__getitem__`` builds the batch's
schema class with a ``Field`` per key (a dtype, a range check and a
precompiled pattern for string ids), validates the records and turns
them into arrays.

Here: batches of 32 records with 16 numeric features, a 16-32-1 Keras
MLP, 20 batches an epoch, 300 epochs; a mini schema library stands in
for marshmallow (its ``SchemaMeta.__init__`` registers every class).
The fixed twin caches schema classes by field set.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; a do-nothing ``monitor.sample``; ``LeakCallback`` replaced by a stub callback): leaky
573.9 / 582.3 / 590.4 / 598.9 / 607.3 MiB RSS at 20 / 40 / 60 / 80 % /
end (~7 KiB a batch) with gc objects 344,563 / 360,720 / 376,497 /
392,773 / 408,987 (~13 a batch: the class, its dicts, fields and
patterns), 10.1 s for 6,000 batches; fixed 565.7 / 565.8 / 565.9 /
565.9 / 565.9 MiB with objects flat (328,413 -> 328,414), 10.4 s.
"""
import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/marshmallow-code/marshmallow/issues/732"
SLICE = "holdout12"
STEPS = 6000           # batches; 20 per epoch, 300 epochs
STEPS_PER_EPOCH = 20
BATCH = 32
FEATURES = 16
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["RecordSchema", "SchemaMeta", "type", "Field", "Pattern", "dict"],
              "holder_any": ["_registry", "class_registry"]},
    "fixed": {"verdict_not": "leak"},
}

_registry = {}                       # class name -> [classes], as marshmallow.class_registry keeps them


class Field:
    def __init__(self, name, kind, lo=None, hi=None, pattern=None):
        self.name, self.kind, self.lo, self.hi = name, kind, lo, hi
        self.regex = re.compile(pattern) if pattern else None
        self.error_messages = {"range": "%s out of range [%s, %s]" % (name, lo, hi), "format": "%s: bad format" % name}

    def validate(self, value):
        if self.regex is not None:
            return bool(self.regex.match(value))
        return self.lo is None or self.lo <= value <= self.hi


class SchemaMeta(type):
    def __init__(cls, name, bases, attrs):
        super().__init__(name, bases, attrs)
        cls._declared_fields = {k: v for k, v in attrs.items() if isinstance(v, Field)}
        _registry.setdefault(name, []).append(cls)                                # every subclass, kept
        _registry.setdefault("%s.%s" % (cls.__module__, name), []).append(cls)


class Schema(metaclass=SchemaMeta):
    def load_many(self, records):
        bad = 0
        for r in records:
            for k, f in self._declared_fields.items():
                if k in r and not f.validate(r[k]):
                    bad += 1
        return bad


OPTIONAL = ("weight", "source_id", "ts")


def _fields_for(keys):
    fields = {"f%d" % i: Field("f%d" % i, "float", -10.0, 10.0) for i in range(6)}
    if "weight" in keys:
        fields["weight"] = Field("weight", "float", 0.0, 5.0)
    if "source_id" in keys:
        fields["source_id"] = Field("source_id", "str", pattern=r"^src-[0-9]{4}$")
    if "ts" in keys:
        fields["ts"] = Field("ts", "int", 0, 2 ** 40)
    return fields


class Records(keras.utils.PyDataset):
    def __init__(self, cache_schemas, **kw):
        super().__init__(**kw)
        self.cache_schemas = cache_schemas
        self.schemas = {}
        self.rng = np.random.default_rng(0)
        self.w = self.rng.normal(size=(FEATURES,)).astype(np.float32)

    def __len__(self):
        return STEPS_PER_EPOCH

    def _schema(self, keys):
        if self.cache_schemas:                                    # the fix: one class per field set
            key = tuple(sorted(keys))
            if key not in self.schemas:
                self.schemas[key] = SchemaMeta("RecordSchema", (Schema,), _fields_for(keys))
            return self.schemas[key]
        return SchemaMeta("RecordSchema", (Schema,), _fields_for(keys))   # the leak: a class per batch

    def __getitem__(self, idx):
        rng = self.rng
        x = rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
        keys = [k for k in OPTIONAL if rng.random() < 0.5]
        records = []
        for row in x:
            r = {"f%d" % i: float(row[i]) for i in range(6)}
            if "weight" in keys:
                r["weight"] = 1.0
            if "source_id" in keys:
                r["source_id"] = "src-%04d" % int(rng.integers(0, 9999))
            if "ts" in keys:
                r["ts"] = int(rng.integers(0, 2 ** 31))
            records.append(r)
        schema = self._schema(keys)()
        schema.load_many(records)
        y = (x @ self.w > 0).astype(np.float32)
        return x, y


def _fit(logdir, steps, cache_schemas):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
    epochs = max(1, steps // STEPS_PER_EPOCH)
    model.fit(Records(cache_schemas), epochs=epochs, verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, cache_schemas=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, cache_schemas=True)
