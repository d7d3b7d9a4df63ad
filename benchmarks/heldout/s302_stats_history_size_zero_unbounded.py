"""A numpy training job embeds a system-stats monitor written like Glances's history (``GlancesAttribute.history_add``) and records CPU, per-core load, memory, network and the training loss every step with ``history_size=0``, which, as the maintainer explained in issue #1447, means "no limit": every sample's ``(datetime, value)`` tuple stays in each attribute's ``_history`` list (plain Python + numpy, no TensorFlow; ~1.5 KiB a step in ``tuple``\s, ``datetime``\s and ``float``\s across 16 lists).

Source: nicolargo/glances issue #1447 "Memory Leak" (closed): a user with
``history_size`` set to 0 sees memory "growing endlessly"; maintainer: "0
for history_size mean no limit... If you want to disable the history, use
the --disable-history option"; and issue #3301: "in case of
history_size>0 memory should increase up to fill the history but should be
constant after". Fix used here (the thread's, for a job that wants the
history): a positive ``history_size`` (the sliding window of the default
configuration), so each history fills to 4,000 samples, at a third of the
run, and holds.
Summary: the monitor is a stand-in with Glances's shape (``GlancesAttribute``
with ``history_add``, ``history_len`` and ``history_mean``, one per stat;
a ``GlancesHistory`` of plugins); the stats are drawn from a seeded model
of a loaded 8-core machine rather than read from ``/proc``. The trainer is
a numpy 32-64-4 softmax network on batches of 2,048 whose loss is one of the
recorded stats; the monitor's 60-sample means feed a throttle check.

Here: 12,000 steps. The fixed monitor keeps at most 4,000 samples a stat.
"""
import datetime
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/nicolargo/glances/issues/1447"
SLICE = "holdout25"
STEPS = 12000
BATCH = 2048
CORES = 8
HISTORY_SIZE = 4000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["tuple", "datetime", "float", "list"],
              "holder_any": ["_history", "GlancesAttribute", "GlancesHistory", "stats_history"]},
    "fixed": {"verdict_not": "leak"},
}


class GlancesAttribute:
    def __init__(self, name, history_max_size=0):
        self.name = name
        self._history_max_size = history_max_size
        self._history = []
        self.value = None

    def history_add(self, value):
        if self._history_max_size and len(self._history) >= self._history_max_size:
            self._history.pop(0)                           # 0 means no limit (glances #1447)
        self._history.append(value)

    def history_len(self):
        return len(self._history)

    def history_mean(self, nb=5):
        tail = self._history[-nb:]
        return sum(v for _, v in tail) / max(1, len(tail))


class GlancesHistory:
    def __init__(self, names, history_size):
        self.stats = {n: GlancesAttribute(n, history_size) for n in names}

    def add(self, name, value, when):
        attr = self.stats[name]
        attr.value = value
        attr.history_add((when, value))


def _run(monitor, steps, history_size):
    rng = np.random.default_rng(0)
    names = ["cpu_total", "mem_percent", "load_1", "net_rx", "net_tx", "swap", "train_loss"] + \
            ["cpu_core_%d" % i for i in range(CORES)] + ["disk_write"]
    stats_history = GlancesHistory(names, history_size)
    w1 = (rng.standard_normal((32, 64)) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((64, 4)) * 0.1).astype(np.float32)
    true_w = rng.standard_normal((32, 4)).astype(np.float32)
    start = datetime.datetime(2026, 12, 1, 9, 0)
    lr = 0.1
    for step in range(steps):
        x = rng.standard_normal((BATCH, 32)).astype(np.float32)
        y = (x @ true_w).argmax(1)
        h = np.maximum(x @ w1, 0)
        z = h @ w2
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        loss = float(-np.log(p[np.arange(BATCH), y] + 1e-9).mean())
        p[np.arange(BATCH), y] -= 1
        g2 = h.T @ p / BATCH
        w1 -= lr * x.T @ ((p @ w2.T) * (h > 0)) / BATCH
        w2 -= lr * g2
        when = start + datetime.timedelta(seconds=3 * step)
        cores = np.clip(rng.normal(70, 15, CORES), 0, 100)
        for name, value in (("cpu_total", float(cores.mean())), ("mem_percent", float(rng.normal(55, 2))),
                            ("load_1", float(rng.gamma(6, 0.5))), ("net_rx", float(rng.exponential(2e6))),
                            ("net_tx", float(rng.exponential(4e5))), ("swap", float(rng.normal(3, 0.1))),
                            ("train_loss", loss), ("disk_write", float(rng.exponential(1e6)))):
            stats_history.add(name, value, when)
        for i in range(CORES):
            stats_history.add("cpu_core_%d" % i, float(cores[i]), when)
        if stats_history.stats["cpu_total"].history_mean(60) > 95:
            lr *= 0.99
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, history_size=0)


def fixed(monitor, steps):
    _run(monitor, steps, history_size=HISTORY_SIZE)
