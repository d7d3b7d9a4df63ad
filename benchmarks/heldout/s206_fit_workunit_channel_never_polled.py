"""A run-tracker callback records Pants-style workunits for every batch (data wait, train step, callbacks) and publishes each completed workunit to the channel of every registered consumer; the file logger polls its channel at each epoch end, but the dynamic-UI consumer is registered by default and is only polled when the interactive UI is on, which it never is in this headless job, so its unbounded channel keeps three workunit dicts a batch (``model.fit`` + ``LeakCallback``; grows every batch, many small objects).

Source: pantsbuild/pants pull request #23485 "Skip queueing workunit
messages for consumers that never poll to avoid unbound memory growth":
"Caught when profiling memoy usage. The channels are unbounded and are
never drained without a plugin/dynamic UI to do it, causing a memory leak."
Fix used here (the PR's): a consumer registered as one that will not poll
gets nothing queued.
Summary: a 48-96-48-1 Keras regressor on synthetic data, ``model.fit``
over a ``PyDataset`` (50 batches of 64 an epoch); each workunit is a dict
with a span id, parent id, level, start and end times, a metadata dict
(epoch, batch, loss, rows) and counters.

Here: 6,000 batches (120 epochs). The fixed tracker skips the consumer
that never polls.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a stub callback in place of
``LeakCallback``): leaky 571.5 / 574.3 / 577.0 / 579.7 / 582.4 MiB RSS at
20 / 40 / 60 / 80 % / end (~2.3 KiB a batch: three workunit dicts with
their metadata and counters dicts and strings) with gc objects 333,756 /
337,357 / 340,956 / 344,556 / 348,156 (3 a batch: the dicts of only atomic
values are untracked), 11.6 s for 6,000 batches (~1.9 ms a batch); fixed
569.8 / 569.9 / 569.9 / 570.0 / 570.1 MiB with objects 330,306 -> 330,309,
12.0 s.
"""
import collections
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/pantsbuild/pants/pull/23485"
SLICE = "holdout17"
STEPS = 6000            # batches; 50 per epoch, 120 epochs
PER_EPOCH = 50
BATCH = 64
FEATURES = 48
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["dict", "str", "float", "deque", "list"],
              "holder_any": ["_channels", "channel", "RunTracker", "tracker", "dynamic"]},
    "fixed": {"verdict_not": "leak"},
}


class WorkunitConsumer:
    def __init__(self, name, will_poll):
        self.name = name
        self.will_poll = will_poll
        self.seen = 0

    def poll(self, items):
        self.seen += len(items)


class FileLogConsumer(WorkunitConsumer):
    def __init__(self):
        super().__init__("file-log", will_poll=True)
        self.tail = collections.deque(maxlen=100)

    def poll(self, items):
        super().poll(items)
        for wu in items:
            self.tail.append("%s %s %.6f" % (wu["span_id"], wu["name"], wu["end_secs"] - wu["start_secs"]))


class RunTracker(keras.callbacks.Callback):
    def __init__(self, skip_non_polling):
        super().__init__()
        self.skip_non_polling = skip_non_polling
        self.consumers = {}
        self._channels = {}
        self._span = 0
        self._root = "root-%08x" % 1

    def register(self, consumer):
        self.consumers[consumer.name] = consumer
        self._channels[consumer.name] = collections.deque()     # unbounded, as in the report

    def _publish(self, workunit):
        for name, consumer in self.consumers.items():
            if self.skip_non_polling and not consumer.will_poll:
                continue                                        # the fix (pants#23485)
            self._channels[name].append(workunit)

    def _workunit(self, name, start, end, epoch, batch, loss):
        self._span += 1
        return {"name": name, "span_id": "%016x" % (self._span * 0x9E3779B97F4A7C15 % 2 ** 64),
                "parent_id": self._root, "level": "DEBUG" if name != "train_step" else "INFO",
                "start_secs": start, "end_secs": end,
                "metadata": {"epoch": epoch, "batch": batch, "loss": loss, "rows": BATCH},
                "counters": {"batches": 1, "rows": BATCH}}

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self._t_end = time.time()

    def on_train_batch_begin(self, batch, logs=None):
        self._t_begin = time.time()

    def on_train_batch_end(self, batch, logs=None):
        now = time.time()
        loss = float(logs["loss"]) if logs and "loss" in logs else 0.0
        self._publish(self._workunit("data_wait", self._t_end, self._t_begin, self.epoch, batch, loss))
        self._publish(self._workunit("train_step", self._t_begin, now, self.epoch, batch, loss))
        self._t_end = time.time()
        self._publish(self._workunit("callbacks", now, self._t_end, self.epoch, batch, loss))

    def on_epoch_end(self, epoch, logs=None):
        for name, consumer in self.consumers.items():
            if consumer.will_poll:                              # only the file logger ever polls
                chan = self._channels[name]
                consumer.poll(list(chan))
                chan.clear()


class Regression(keras.utils.PyDataset):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((PER_EPOCH * BATCH, FEATURES)).astype(np.float32)
        w = rng.standard_normal(FEATURES)
        self.y = (np.tanh(self.x @ w / 4) + 0.1 * rng.standard_normal(len(self.x))).astype(np.float32)

    def __len__(self):
        return PER_EPOCH

    def __getitem__(self, idx):
        sl = slice(idx * BATCH, (idx + 1) * BATCH)
        return self.x[sl], self.y[sl]


def _fit(logdir, steps, skip_non_polling):
    keras.utils.set_random_seed(0)
    tracker = RunTracker(skip_non_polling)
    tracker.register(FileLogConsumer())
    tracker.register(WorkunitConsumer("dynamic-ui", will_poll=False))   # headless: never polled
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(96, activation="relu"),
                              keras.layers.Dense(48, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(Regression(), epochs=max(1, steps // PER_EPOCH), verbose=0,
              callbacks=[tracker, tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, skip_non_polling=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, skip_non_polling=True)
