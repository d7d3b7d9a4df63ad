"""An error-reporting log handler keeps the last 1,500 records for a post-mortem dump and sends the last 20 as context with a report; after building a record's context it stores that list on the record itself (``record.history``), so every record points at the 20 before it, each of which points at its own 20, and truncating the handler's history frees nothing and every batch's record, with the batch preview it carries, stays reachable (``model.fit`` with a ``PyDataset`` that logs each batch).

Source: rollbar/pyrollbar PR #43 "Fix memory leak in in history
collection": "History is stored as a list of logger records. After
determining the history for a given record, that history was then added
to the record. This led to a tree of records. Even though the history
in the logger was truncated, active records in the history would
continue to point to inactive ones, and so on, causing a memory leak."
Fix used here (the PR's): the history is a local variable used to build
the report, never an attribute of the record, so the handler's bounded
history fills once (over the first ~19 % of the run) and then holds.
Summary: a ``PyDataset`` logs every batch it builds (its index, label
balance and a preview of the first rows) to a logger whose
``HistoryHandler`` sends the recent history with any error report.

Here: batches of 64 x 64 float32 features, an 8-row preview (2 KiB) on
each record, a 64-64-1 model, 20 batches an epoch, 400 epochs; the
handler's history is a ``deque(maxlen=1500)``. The fixed twin keeps the
history off the records.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; a do-nothing ``monitor.sample``;
``LeakCallback`` replaced by a stub callback): leaky 571.7 / 577.6 /
583.4 / 588.8 / 594.5 MiB RSS at 20 / 40 / 60 / 80 % / end (~3.7 KiB a
batch) with gc objects 333,309 / 338,119 / 342,963 / 347,787 / 352,651
(three a batch: the record, its ``__dict__`` and its context list),
17.6 s for 8,000 batches (the collector walking the growing chain);
fixed 571.4 / 572.0 / 572.2 / 572.4 / 572.5 MiB with objects 331,627 /
332,847 / 332,976 / 332,977 / 332,975 (the 1,500-record history full,
then held), 13.1 s.
"""
import collections
import itertools
import logging
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/rollbar/pyrollbar/pull/43"
SLICE = "holdout13"
STEPS = 8000           # batches; 20 per epoch, 400 epochs
STEPS_PER_EPOCH = 20
BATCH = 64
FEATURES = 64
PREVIEW_ROWS = 8
HISTORY = 1500         # records kept for a post-mortem dump
CONTEXT = 20           # records sent with a report
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["LogRecord", "list", "ndarray", "dict"],
              "holder_any": ["history", "HistoryHandler"]},
    "fixed": {"verdict_not": "leak"},
}


class HistoryHandler(logging.Handler):
    def __init__(self, history_on_record):
        super().__init__(level=logging.INFO)
        self.history_on_record = history_on_record
        self._history = collections.deque(maxlen=HISTORY)
        self.reports = 0

    def emit(self, record):
        history = list(itertools.islice(reversed(self._history), CONTEXT))[::-1]
        if self.history_on_record:
            record.history = history                 # the leak: each record points at the ones before it
        self._history.append(record)
        if record.levelno >= logging.ERROR:          # a report carries the recent context
            self.reports += 1
            _payload = [(r.getMessage(), r.created) for r in history]


class LoggedBatches(keras.utils.PyDataset):
    def __init__(self, log, **kw):
        super().__init__(**kw)
        self.log = log
        self.rng = np.random.default_rng(0)
        self.direction = self.rng.normal(size=FEATURES).astype(np.float32)

    def __len__(self):
        return STEPS_PER_EPOCH

    def __getitem__(self, idx):
        x = self.rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
        y = (x @ self.direction > 0).astype(np.float32)
        self.log.info("batch %d: %.2f positive", idx, float(y.mean()),
                      extra={"preview": x[:PREVIEW_ROWS].copy(), "labels": y[:PREVIEW_ROWS].copy()})
        return x, y


def _fit(logdir, steps, history_on_record):
    keras.utils.set_random_seed(0)
    log = logging.getLogger("h13.s158.batches")
    log.handlers.clear()
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(HistoryHandler(history_on_record))
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
    epochs = max(1, steps // STEPS_PER_EPOCH)
    model.fit(LoggedBatches(log), epochs=epochs, verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, history_on_record=True)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, history_on_record=False)
