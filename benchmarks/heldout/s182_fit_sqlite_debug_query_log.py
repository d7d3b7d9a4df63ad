"""A metrics callback stores every batch's metrics in a SQLite run database through a small wrapper that, while ``debug`` is on, records each executed statement with its parameters and duration for later inspection, the way Django's ``connection.queries`` did; left on for a long training run, the query log keeps every statement ever executed (``model.fit`` + ``LeakCallback``; a steady leak, the fixed twin fills and then holds).

Source: django/django PR #2772 "Fixed #3711, #6734, #12581 -- Bounded
connection.queries" ("Prevented unlimited memory consumption when
running background tasks with DEBUG=True"), and
pallets-eco/flask-sqlalchemy issue #181 "Memory leak in DEBUG mode"
("Flask-SQLAlchemy record all SQL queries in debug mode ... it also
consume all my memory in long running processes ... I suggest a hard
limit to record only last N queries"). Fix used here (the PR's): the log
is a ``collections.deque(maxlen=9000)``, so it keeps the last 9,000
statements.
Summary: a 32-64-64-4 Keras MLP trained with ``model.fit``; at every
batch end the callback inserts the batch's metrics, updates the run's
progress row and reads back the best loss so far (three statements a
batch), on a file database in a temporary directory with a 256 KiB page
cache.

Here: 50 batches of 32 an epoch, 240 epochs (12,000 batches); the fixed
twin's log is full after 3,000 batches (25 %).

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, SQLite 3, TF 2.21 / Keras 3.15; a do-nothing
``monitor.sample``; ``LeakCallback`` replaced by a stub callback): leaky
580.5 / 585.6 / 588.3 / 591.4 / 594.1 MiB RSS at 20 / 40 / 60 / 80 % /
end (~1.2 KiB a batch: three logged statements) with gc objects flat
(325,210 -> 325,066: the log's dicts hold only strings, which the
collector does not track, in one list), 28.9 s for 12,000 batches
(~2.4 ms a batch); fixed 580.0 / 583.4 / 583.4 / 583.5 / 583.5 MiB (full
at 25 %) with the same objects, 27.7 s. A 24,000-batch check of the
fixed twin: 580.9 / 583.4 / 583.6 / 583.7 / 583.7 MiB. Two details keep
the fixed twin flat once its deque is full: SQLite's page cache is
capped at 256 KiB (at its default, ~2 MiB, the cache grew with the run's
database and the fixed twin's RSS crept by ~1.5 MiB over the last 60 %
of a 24,000-batch run), and parameters are rendered at a fixed width
(with ``%r``, floats of varying length, it crept ~0.5 MiB over the same
span, against ~0.3 MiB now and ~0.2 MiB with the log switched off).
"""
import collections
import os
import shutil
import sqlite3
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/django/django/pull/2772"
SLICE = "holdout15"
STEPS = 12000          # batches; 50 per epoch, 240 epochs
STEPS_PER_EPOCH = 50
BATCH = 32
FEATURES = 32
QUERIES_LIMIT = 9000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["dict", "str", "list", "float", "tuple"],
              "holder_any": ["queries_log", "MetricsDB", "db"]},
    "fixed": {"verdict_not": "leak"},
}


def _literal(value):
    """The parameter as the statement would show it (floats in a fixed width, as a driver's quoting does)."""
    if isinstance(value, float):
        return "%.9e" % value
    if isinstance(value, str):
        return "'%s'" % value.replace("'", "''")
    return str(value)


class MetricsDB:
    def __init__(self, path, bounded, debug=True):
        self.conn = sqlite3.connect(path)
        self.conn.execute("PRAGMA cache_size = -256")       # a 256 KiB page cache, full early in the run
        self.debug = debug
        # the leak: a plain list; the fix: a bounded deque, as in Django's fix
        self.queries_log = collections.deque(maxlen=QUERIES_LIMIT) if bounded else []
        self.execute("CREATE TABLE metrics (step INTEGER, epoch INTEGER, loss REAL, mae REAL, lr REAL, wall REAL)")
        self.execute("CREATE TABLE progress (run TEXT PRIMARY KEY, step INTEGER, best REAL)")
        self.execute("INSERT INTO progress VALUES (?, ?, ?)", ("run-0", 0, 1e9))

    def execute(self, sql, params=()):
        start = time.perf_counter()
        try:
            return self.conn.execute(sql, params)
        finally:
            if self.debug:
                self.queries_log.append({
                    "sql": sql.replace("?", "%s") % tuple(map(_literal, params)) if params else sql,
                    "time": "%.6f" % (time.perf_counter() - start)})

    def close(self):
        self.conn.commit()
        self.conn.close()


class MetricsToDB(keras.callbacks.Callback):
    def __init__(self, db):
        super().__init__()
        self.db = db
        self.step = 0
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss, mae = float(logs["loss"]), float(logs["mae"])
        self.db.execute("INSERT INTO metrics VALUES (?, ?, ?, ?, ?, ?)",
                        (self.step, self.epoch, loss, mae, 0.01, time.time()))
        self.db.execute("UPDATE progress SET step = ?, best = MIN(best, ?) WHERE run = ?", (self.step, loss, "run-0"))
        self.db.execute("SELECT best FROM progress WHERE run = ?", ("run-0",)).fetchone()
        self.step += 1

    def on_epoch_end(self, epoch, logs=None):
        self.db.conn.commit()


def _fit(logdir, steps, bounded):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    n = STEPS_PER_EPOCH * BATCH
    x = rng.standard_normal((n, FEATURES)).astype(np.float32)
    y = np.tanh(x @ rng.standard_normal((FEATURES, 4)).astype(np.float32) / 4)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(4)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", metrics=["mae"])
    root = tempfile.mkdtemp(prefix="runsdb-")
    db = MetricsDB(os.path.join(root, "runs.sqlite"), bounded)
    try:
        model.fit(x, y, batch_size=BATCH, epochs=max(1, steps // STEPS_PER_EPOCH), shuffle=True, verbose=0,
                  callbacks=[MetricsToDB(db), tb_leak_plugin.keras.LeakCallback(logdir)])
    finally:
        db.close()
        shutil.rmtree(root, ignore_errors=True)


def leaky_fit(logdir, steps):
    _fit(logdir, steps, bounded=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, bounded=True)
