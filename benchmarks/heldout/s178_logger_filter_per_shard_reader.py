"""Each shard reader of a streaming trainer tags its log records with the shard id by adding its own ``logging.Filter`` to the shared ``train.data`` logger when it is created, and nothing ever removes it; the logger's ``filters`` list keeps every reader's filter, each filter keeps its reader (with the decoded shard), and every record now runs through every filter, so memory grows once a shard and each log call gets slower (``tf.function`` train step; grows once a shard, step time grows).

Source: wazuh/wazuh issue #4463 "Memory leak in wazuh-clusterd logging
and logging filters": "due to ``self.logger.addFilter(self.logger_filter)``,
every new local request using a ``Handler`` will create a
``ClusterFilter`` object and add it to the logger, potentially
accumulating 2^20 ``ClusterFilter`` objects in the memory". Fix used
here (the issue's): one filter installed once, which reads the current
tag from a ``contextvars.ContextVar`` that each reader sets.
Summary: a 32-64-1 regressor trained with a ``tf.function`` step on
minibatches drawn from 512 x 32 float32 shards; every step logs one
record (loss, shard, offset) to a handler on ``os.devnull``.

Here: a shard every 25 steps, 20,000 steps (800 shards). The fixed twin
uses the context-variable filter.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21; a do-nothing ``monitor.sample``): leaky
574.7 / 585.1 / 595.6 / 606.1 / 616.6 MiB RSS at 20 / 40 / 60 / 80 % /
end (~66 KiB a shard: the reader's arrays, kept by its filter) with gc
objects 316,254 / 316,574 / 316,895 / 317,214 / 317,535 (2 a shard: the
arrays are not tracked by the collector), 12.3 s for 20,000 steps (~0.6
ms a step, the last fifth ~10 % slower than the first with 800 filters
per record); fixed 565.4 / 567.1 / 567.8 / 567.8 / 567.8 MiB with objects
315,938 -> 315,942, 11.0 s.
"""
import contextvars
import logging
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/wazuh/wazuh/issues/4463"
SLICE = "holdout15"
STEPS = 20000
STEPS_PER_SHARD = 25
ROWS = 512
FEATURES = 32
BATCH = 64
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ShardTagFilter", "ShardReader", "ndarray", "Filter", "list"],
              "holder_any": ["filters", "train.data", "Logger"]},
    "fixed": {"verdict_not": "leak"},
}

log = logging.getLogger("train.data")
_shard_tag = contextvars.ContextVar("shard_tag", default="-")


class ShardTagFilter(logging.Filter):
    def __init__(self, reader):
        super().__init__()
        self.reader = reader

    def filter(self, record):
        if getattr(record, "shard_reader", None) is self.reader:
            record.shard = self.reader.tag
        return True


class ContextTagFilter(logging.Filter):
    def filter(self, record):
        record.shard = _shard_tag.get()
        return True


class ShardReader:
    def __init__(self, index, rng, w_true, tag_with_context):
        self.tag = "shard-%05d" % index
        self.x = rng.standard_normal((ROWS, FEATURES)).astype(np.float32)
        self.y = (np.tanh(self.x @ w_true) + 0.05 * rng.standard_normal(ROWS)).astype(np.float32)
        if tag_with_context:
            _shard_tag.set(self.tag)                          # the fix: one filter, a context variable
        else:
            log.addFilter(ShardTagFilter(self))               # the leak: a filter per reader, never removed

    def batch(self, rng):
        idx = rng.integers(0, ROWS, BATCH)
        return self.x[idx], self.y[idx]


def _train(monitor, steps, tag_with_context):
    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    devnull = open(os.devnull, "w")
    handler = logging.StreamHandler(devnull)
    handler.setFormatter(logging.Formatter("%(asctime)s %(shard)s %(message)s"))
    log.handlers[:] = [handler]
    log.filters[:] = [ContextTagFilter()] if tag_with_context else []
    log.setLevel(logging.INFO)
    log.propagate = False
    w_true = rng.standard_normal(FEATURES).astype(np.float32) / 4
    w1 = tf.Variable(tf.random.normal((FEATURES, 64), stddev=0.2))
    w2 = tf.Variable(tf.zeros((64, 1)))
    opt = tf.keras.optimizers.SGD(0.05)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            pred = tf.nn.tanh(x @ w1) @ w2
            loss = tf.reduce_mean((pred[:, 0] - y) ** 2)
        grads = tape.gradient(loss, [w1, w2])
        opt.apply_gradients(zip(grads, [w1, w2]))
        return loss

    reader = None
    try:
        for step in range(steps):
            if step % STEPS_PER_SHARD == 0:
                reader = ShardReader(step // STEPS_PER_SHARD, rng, w_true, tag_with_context)
            x, y = reader.batch(rng)
            loss = train_step(tf.constant(x), tf.constant(y))
            log.info("step %d loss %.5f offset %d", step, float(loss), step % STEPS_PER_SHARD,
                     extra={"shard_reader": reader})
            monitor.sample(step)
    finally:
        log.handlers[:] = []
        log.filters[:] = []
        devnull.close()


def leaky(monitor, steps):
    _train(monitor, steps, tag_with_context=False)


def fixed(monitor, steps):
    _train(monitor, steps, tag_with_context=True)
