"""A data-quality step compiles a JSON-schema validator for every incoming shard (each shard ships its own schema with its own ``$id`` and label enum) with a fast-validator library whose ``RefResolver.__init__(self, base_uri, schema, store={})`` takes a mutable default argument and writes every resolved schema into it; the one default dict, living on the function object, keeps every shard's schema document for the rest of the run (numpy, no TensorFlow; a burst every shard).

Source: horejsek/python-fastjsonschema PR #130 "Fix unexpected caching
(issue #129)": "replace all the empty dictionaries used as mutable default
arguments with ``None``"; the author: "function calls that do not specify
all the arguments but instead rely on a default mutable argument are the
root cause of the problem", and the earlier PR #113 flagged the same
defaults as "dangerous code". Fix used here (the PR's): ``store=None``
and a fresh ``store = {} if store is None else store`` per compile.
Summary: label-noise filtering before a softmax classifier: every record
of a shard is validated (its ``label`` must be in the shard's enum of
600 labels, its ``score`` in range) before its features are used.

Here: a shard every 100 steps (1,500 shards, each schema ~50 KiB as
Python objects), 16 records a step, a 32-16 softmax classifier in numpy,
150,000 steps. The fixed twin passes no shared default.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky
51.7 / 67.5 / 83.2 / 99.0 / 114.8 MiB RSS at 20 / 40 / 60 / 80 % / end
(~54 KiB a shard) with gc objects 25,425 / 27,225 / 29,017 / 30,817 /
32,617 (six a shard: the schema's dicts and label list), 8.7 s for
150,000 steps; fixed 36.1 / 36.3 / 36.3 / 36.3 / 36.3 MiB with objects
flat (23,631 -> 23,635), 5.5 s.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/horejsek/python-fastjsonschema/pull/130"
SLICE = "holdout14"
STEPS = 150000
STEPS_PER_SHARD = 100
RECORDS = 16
LABELS = 600
CLASSES = 16
FEATURES = 32
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["dict", "list", "str"],
              "holder_any": ["store", "__defaults__", "RefResolver"]},
    "fixed": {"verdict_not": "leak"},
}


class RefResolver:
    def __init__(self, base_uri, schema, store={}):          # the leak: one dict for every call
        self.base_uri = base_uri
        self.schema = schema
        self.store = store
        self.store[base_uri] = schema
        self._walk(schema)

    def _walk(self, node):
        if isinstance(node, dict):
            if "$id" in node:
                self.store[node["$id"]] = node
            for value in node.values():
                self._walk(value)

    def resolve(self, ref):
        return self.store[ref]


class FixedRefResolver(RefResolver):
    def __init__(self, base_uri, schema, store=None):        # the fix: a fresh store per compile
        super().__init__(base_uri, schema, {} if store is None else store)


def compile_validator(schema, resolver_cls):
    resolver = resolver_cls(schema["$id"], schema)
    props = resolver.resolve(schema["$id"])["properties"]
    allowed = frozenset(props["label"]["enum"])
    lo, hi = props["score"]["minimum"], props["score"]["maximum"]

    def validate(record):
        return record["label"] in allowed and lo <= record["score"] <= hi
    return validate


def _shard_schema(rng, shard):
    labels = ["site%d/label-%04d" % (shard, int(k)) for k in rng.choice(5000, LABELS, replace=False)]
    return {"$id": "https://data.example/shards/%06d.json" % shard, "type": "object",
            "properties": {"label": {"type": "string", "enum": labels},
                           "score": {"type": "number", "minimum": 0.0, "maximum": 1.0},
                           "features": {"type": "array", "items": {"type": "number"}}},
            "required": ["label", "score", "features"]}


def _train(monitor, steps, resolver_cls):
    rng = np.random.default_rng(0)
    w = np.zeros((FEATURES, CLASSES), np.float32)
    validate = labels = None
    kept = 0
    for step in range(steps):
        if step % STEPS_PER_SHARD == 0:
            schema = _shard_schema(rng, step // STEPS_PER_SHARD)
            labels = schema["properties"]["label"]["enum"]
            validate = compile_validator(schema, resolver_cls)
        x = rng.standard_normal((RECORDS, FEATURES)).astype(np.float32)
        y = rng.integers(0, CLASSES, RECORDS)
        ok = np.array([validate({"label": labels[int(k)] if k < LABELS else "unknown",
                                 "score": float(s), "features": None})
                       for k, s in zip(rng.integers(0, LABELS + 20, RECORDS), rng.random(RECORDS) * 1.05)])
        kept += int(ok.sum())
        x, y = x[ok], y[ok]
        if len(y):
            x[np.arange(len(y)), y % FEATURES] += 2.0
            z = x @ w
            p = np.exp(z - z.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            p[np.arange(len(y)), y] -= 1.0
            w -= 0.1 * (x.T @ p) / len(y)
        monitor.sample(step)
    return kept


def leaky(monitor, steps):
    _train(monitor, steps, RefResolver)


def fixed(monitor, steps):
    _train(monitor, steps, FixedRefResolver)
