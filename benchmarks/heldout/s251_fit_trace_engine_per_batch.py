"""A Keras ``PyDataset`` reads every batch from a SQLite feature store through a SQLAlchemy-style engine, and the batch-fetching helper calls a tracing integration's ``trace_engine(engine, service=...)`` before each query, taking it for idempotent; like dd-trace-py before pull request #18361, ``trace_engine`` builds a new ``EngineTracer`` on every call, each registering its own ``before_cursor_execute`` / ``after_cursor_execute`` / ``handle_error`` listeners on the long-lived engine, so the engine's listener lists keep one more tracer per batch and every query runs all of them (``model.fit`` on a ``PyDataset`` + ``LeakCallback``; grows every batch, small: ~2 KiB a batch of Python objects; the batch time grows with the listener lists, from ~4 ms to ~21 ms).

Source: DataDog/dd-trace-py pull request #18361 "fix(sqlalchemy): avoid
duplicate engine listeners" (merged): "Fix duplicate SQLAlchemy engine
listeners when ``trace_engine()`` is called repeatedly for the same engine.
``trace_engine(engine)`` created a new ``EngineTracer`` every time, which
registered another set of SQLAlchemy event listeners on long-lived engines.
This change reuses the existing tracer attached to the engine and updates
the service/pin when a new service is provided." Fix used here (the PR's):
``trace_engine`` returns the tracer already attached to the engine,
updating its service.
Summary: the engine is a stand-in with SQLAlchemy's event shape over a real
``sqlite3`` connection: ``event.listen(engine, name, fn)`` appends ``fn`` to
``engine.dispatch.<name>`` and records the registration in a module-level
``_key_to_collection`` map (weak references, as SQLAlchemy's registry
does); ``execute`` fires ``before_cursor_execute`` and
``after_cursor_execute`` around the cursor call. The tracer is a stand-in
with ``ddtrace``'s shape: ``EngineTracer`` opens a span per query in
``_before_cur_exec`` and finishes it in ``_after_cur_exec``; finished spans
go to a writer buffer of 1,000 that is flushed every 500 spans. The model
is a Keras 24-64-64-1 regressor trained with ``model.fit`` (Adam, 100
batches of 64 an epoch) on a 6,400-row in-memory feature table.

Here: 3,500 batches (35 epochs). The fixed ``trace_engine`` reuses the
engine's tracer.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a stub callback in place of
``LeakCallback``; RSS read before each object count, at the marks only):
leaky 568.9 / 570.3 / 571.8 / 573.2 / 574.5 MiB RSS at 20 / 40 / 60 / 80 % /
end (565.7 MiB at the first batch; ~2.0 KiB a batch: an ``EngineTracer`` and
its ``Pin``, three bound methods in the engine's listener lists and three
registry entries with their weak references) with gc objects 330,852 at the
first batch, then 336,230 / 341,680 / 347,424 / 352,870 / 358,619 at the
same marks (about eight a batch), 47.7 s for 3,500 batches (~4 ms a batch
over the first 350, ~21 ms over the last 350); fixed 567.4 / 567.7 / 567.9 /
567.9 / 567.9 MiB with objects 331,127 / 331,424 / 331,020 / 331,317 /
330,913 (the span buffer filling and flushing), 21.6 s (~6 ms a batch). 54 s
(leaky) and 30 s (fixed) in their processes, imports included.
"""
import collections
import os
import sqlite3
import time
import weakref

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/DataDog/dd-trace-py/pull/18361"
SLICE = "holdout21"
STEPS = 3500            # batches; 100 per epoch, 35 epochs
PER_EPOCH = 100
BATCH = 64
FEATURES = 24
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EngineTracer", "method", "dict", "weakref"],
              "holder_any": ["dispatch", "before_cursor_execute", "_key_to_collection", "engine"]},
    "fixed": {"verdict_not": "leak"},
}

# ---------------------------------------------------------------- SQLAlchemy-style events

_key_to_collection = collections.defaultdict(dict)          # sqlalchemy.event.registry


class _Dispatch:
    def __init__(self):
        self.before_cursor_execute = []
        self.after_cursor_execute = []
        self.handle_error = []


def listen(target, identifier, fn):
    collection = getattr(target.dispatch, identifier)
    collection.append(fn)
    key = (id(target), identifier, id(fn.__self__), fn.__func__.__name__)
    _key_to_collection[key][id(collection)] = weakref.ref(fn.__self__)


class Engine:
    def __init__(self, conn):
        self.conn = conn
        self.name = "sqlite"
        self.dispatch = _Dispatch()

    def execute(self, statement, parameters=()):
        cursor = self.conn.cursor()
        for fn in self.dispatch.before_cursor_execute:
            fn(self, cursor, statement, parameters, None, False)
        try:
            rows = cursor.execute(statement, parameters).fetchall()
        except Exception as e:
            for fn in self.dispatch.handle_error:
                fn(e)
            raise
        for fn in self.dispatch.after_cursor_execute:
            fn(self, cursor, statement, parameters, None, False)
        cursor.close()
        return rows

# ---------------------------------------------------------------- ddtrace-style tracer


class Span:
    __slots__ = ("name", "service", "resource", "start", "duration", "tags")

    def __init__(self, name, service, resource):
        self.name, self.service, self.resource = name, service, resource
        self.start = time.perf_counter()
        self.duration = None
        self.tags = {}

    def finish(self):
        self.duration = time.perf_counter() - self.start


class Tracer:
    def __init__(self):
        self.buffer = collections.deque(maxlen=1000)
        self.flushed = 0

    def trace(self, name, service, resource):
        return Span(name, service, resource)

    def write(self, span):
        self.buffer.append(span)
        if len(self.buffer) >= 500:
            self.flushed += len(self.buffer)
            self.buffer.clear()


class Pin:
    def __init__(self, service, tracer):
        self.service, self.tracer = service, tracer

    def onto(self, obj):
        obj._datadog_pin = self


class EngineTracer:
    def __init__(self, tracer, service, engine):
        self.tracer = tracer
        self.engine = engine
        self.vendor = "sqlite" if "sqlite" in engine.name else engine.name
        self.service = service or self.vendor
        self.name = "%s.query" % self.vendor
        self._span = None
        Pin(self.service, tracer).onto(engine)
        listen(engine, "before_cursor_execute", self._before_cur_exec)
        listen(engine, "after_cursor_execute", self._after_cur_exec)
        listen(engine, "handle_error", self._handle_error)

    def _before_cur_exec(self, conn, cursor, statement, *args):
        self._span = self.tracer.trace(self.name, service=self.service, resource=statement)
        self._span.tags["sql.db"] = "features"

    def _after_cur_exec(self, conn, cursor, statement, *args):
        span, self._span = self._span, None
        if span is not None:
            span.tags["sql.rows"] = cursor.rowcount
            span.finish()
            self.tracer.write(span)

    def _handle_error(self, exc):
        if self._span is not None:
            self._span.tags["error"] = repr(exc)


def trace_engine(engine, tracer, service=None, reuse=True):
    if reuse:                                                # the fix (dd-trace-py #18361)
        existing = getattr(engine, "_datadog_engine_tracer", None)
        if existing is not None:
            if service and service != existing.service:
                existing.service = service
                Pin(service, tracer).onto(engine)
            return existing
    engine._datadog_engine_tracer = EngineTracer(tracer, service, engine)
    return engine._datadog_engine_tracer

# ---------------------------------------------------------------- data and training


class FeatureStoreDataset(keras.utils.PyDataset):
    def __init__(self, engine, tracer, reuse, **kwargs):
        super().__init__(**kwargs)
        self.engine, self.tracer, self.reuse = engine, tracer, reuse
        self.order = np.arange(PER_EPOCH)

    def __len__(self):
        return PER_EPOCH

    def fetch_batch(self, index):
        trace_engine(self.engine, self.tracer, service="feature-store", reuse=self.reuse)
        start = int(self.order[index]) * BATCH
        rows = self.engine.execute("SELECT * FROM features WHERE rowid > ? AND rowid <= ?", (start, start + BATCH))
        arr = np.asarray(rows, dtype=np.float32)
        return arr[:, 1:FEATURES + 1], arr[:, FEATURES + 1:]

    def __getitem__(self, index):
        return self.fetch_batch(index)

    def on_epoch_end(self):
        self.order = np.random.default_rng(len(self.tracer.buffer)).permutation(PER_EPOCH)


def _fit(logdir, steps, reuse):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    conn = sqlite3.connect(":memory:", check_same_thread=False)      # as SQLAlchemy's StaticPool for :memory:
    cols = ", ".join("f%d REAL" % i for i in range(FEATURES))
    conn.execute("CREATE TABLE features (id INTEGER, %s, y REAL)" % cols)
    x = rng.standard_normal((PER_EPOCH * BATCH, FEATURES))
    w = rng.standard_normal(FEATURES) / 5
    y = np.tanh(x @ w) + 0.05 * rng.standard_normal(len(x))
    conn.executemany("INSERT INTO features VALUES (%s)" % ", ".join("?" * (FEATURES + 2)),
                     [(i, *map(float, x[i]), float(y[i])) for i in range(len(x))])
    conn.commit()
    engine = Engine(conn)
    tracer = Tracer()
    data = FeatureStoreDataset(engine, tracer, reuse)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    try:
        model.fit(data, epochs=max(1, steps // PER_EPOCH), verbose=0,
                  callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])
    finally:
        conn.close()
        _key_to_collection.clear()


def leaky_fit(logdir, steps):
    _fit(logdir, steps, reuse=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, reuse=True)
