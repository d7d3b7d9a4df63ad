"""A Keras regressor trains with ``model.fit`` on a ``PyDataset`` that pulls its observation files through a data-pump flow written like Sarracenia's before pull request #1603: each housekeeping pass of ``_runCallbackMetrics`` takes a direct reference to ``self.plugins["metricsReport"]`` and appends every active transfer protocol's ``metricsReport`` bound method onto it, so the live plugin list grows by one bound method per protocol per pass, and every later pass calls all the duplicates (``model.fit`` on a ``PyDataset`` + ``LeakCallback``; small: 3 bound methods, ~0.2 KiB, a batch, in one ``list``; the duplicate calls make later batches slower).

Source: MetPX/sarracenia pull request #1603 "Fix metricsReport plugin list
leak in flow engine" (merged): "``_runCallbackMetrics`` was grabbing a
direct reference to ``self.plugins["metricsReport"]`` and appending
transfer protocol functions onto it every housekeeping cycle. So the list
just grows forever - and every subsequent cycle calls all the duplicates
too ... One-liner: ``list(self.plugins["metricsReport"])`` instead of
``self.plugins["metricsReport"]`` so we work on a copy." A maintainer
reported the results after 18 hours on a data pump as "already amazing".
Fix used here (the PR's): the pass works on a copy of the plugin list.
Summary: the flow is a stand-in with Sarracenia's shape (``plugins`` dict of
entry-point lists, ``proto`` dict of transfer objects for ``sftp``,
``https`` and ``amqp`` each with ``metricsReport()`` returning its
counters, ``housekeeping()`` calling ``_runCallbackMetrics()``); the flow
"downloads" each batch's observation files (bytes generated from a seed)
through a protocol and runs housekeeping once a batch. The model is a
Keras 24-32-1 network fitted on 32 decoded records a batch (Adam).

Here: 4,000 batches (40 epochs). The fixed pass appends to a copy.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/MetPX/sarracenia/pull/1603"
SLICE = "holdout25"
STEPS = 4000            # batches; 100 per epoch, 40 epochs
PER_EPOCH = 100
BATCH = 32
FEATURES = 24
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["method", "list"],
              "holder_any": ["plugins", "metricsReport", "Flow"]},
    "fixed": {"verdict_not": "leak"},
}


class Transfer:
    def __init__(self, scheme):
        self.scheme = scheme
        self.metrics = {"byteCount": 0, "fileCount": 0, "errors": 0}

    def get(self, name, rng):
        data = rng.standard_normal(FEATURES + 1).astype(np.float32).tobytes()
        self.metrics["byteCount"] += len(data)
        self.metrics["fileCount"] += 1
        return data

    def metricsReport(self):
        return self.metrics


class Flow:
    def __init__(self, copy_plugins):
        self.copy_plugins = copy_plugins
        self.proto = {s: Transfer(s) for s in ("sftp", "https", "amqp")}
        self.plugins = {"metricsReport": [self.flowMetrics], "after_work": []}
        self.counters = {"msgs": 0}
        self.last_metrics = {}

    def flowMetrics(self):
        return self.counters

    def _runCallbackMetrics(self):
        if self.copy_plugins:
            modules = list(self.plugins["metricsReport"])     # the fix (sarracenia #1603)
        else:
            modules = self.plugins["metricsReport"]           # a live reference ...
        for p in self.proto.values():
            modules.append(p.metricsReport)                   # ... grows every pass
        metrics = {}
        for fn in modules:
            metrics[getattr(fn, "__self__", self).__class__.__name__] = fn()
        self.last_metrics = metrics

    def housekeeping(self):
        self._runCallbackMetrics()


class ObservationFeed(keras.utils.PyDataset):
    def __init__(self, flow, seed=0):
        super().__init__()
        self.flow = flow
        self.rng = np.random.default_rng(seed)
        self.w = np.random.default_rng(1).standard_normal(FEATURES).astype(np.float32)
        self.schemes = list(flow.proto)

    def __len__(self):
        return PER_EPOCH

    def __getitem__(self, index):
        rows = np.empty((BATCH, FEATURES + 1), np.float32)
        for i in range(BATCH):
            proto = self.flow.proto[self.schemes[i % 3]]
            rows[i] = np.frombuffer(proto.get("obs_%d_%d.bin" % (index, i), self.rng), np.float32)
            self.flow.counters["msgs"] += 1
        self.flow.housekeeping()
        x = rows[:, :FEATURES]
        return x, x @ self.w + 0.1 * rows[:, FEATURES]


def _fit(logdir, steps, copy_plugins):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    model.fit(ObservationFeed(Flow(copy_plugins)), epochs=max(1, steps // PER_EPOCH), verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, copy_plugins=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, copy_plugins=True)
