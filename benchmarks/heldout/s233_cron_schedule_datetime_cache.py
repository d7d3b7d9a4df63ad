"""An online regressor decides when to snapshot its weights and when to run a held-out evaluation from two cron expressions, asking the cron library for the next due time from the current clock after every update; the library is written like croniter 6.0.0, whose ``timestamp_to_datetime`` stores every datetime it builds in the module-level ``TIMESTAMP_TO_DT_CACHE`` dict, so each query's never-repeating start time adds an entry that is never read again (plain Python + numpy, no TensorFlow; grows every step, small: ~0.37 KiB a step; the leaked tuples hold only datetimes and strings, so the collector stops tracking them and gc counts stay nearly flat).

Source: pallets-eco/croniter issue #182 "Croniter 6.0.0 introduces a memory
leak": "In v6.0.0, croniter added logic to cache datetime objects in a global
dict ... Unfortunately, this introduces a memory leak, since we add to this
global dict indefinitely." Pull request #185 "Fix memory leak by removing
``TIMESTAMP_TO_DT_CACHE``" (merged): "every while loop with periodic (say
1s) invoking croniter to check if it is time to run something based on cron
expression, will eventually end up eating all memory possible." Fix used
here (the PR's): ``timestamp_to_datetime`` builds the datetime and returns
it, with no module-level cache.
Summary: a 32-feature linear model trained by mini-batch SGD (16 rows) with
numpy on a slowly drifting synthetic stream, on a simulated clock that
advances 0.5 s (plus a few microseconds of jitter) per update; after each
update it asks ``croniter("*/10 * * * *", now).get_next(datetime)`` and
``croniter("0 * * * *", now).get_next(datetime)`` whether a snapshot or an
evaluation is due. Snapshots go to a ring of the last 3 weight vectors, the
evaluation scores the model on 256 held-out rows. The cron library is a
small stand-in with croniter's
``_get_next``/``_calc``/``timestamp_to_datetime`` structure for minute and
hour fields, including 6.0.0's cache, which stores each result under
``(datetime, repr(tzinfo))`` in ``TIMESTAMP_TO_DT_CACHE``.

Here: 460,000 steps. The fixed library has no ``TIMESTAMP_TO_DT_CACHE``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS read before each
object count, at the marks only): leaky 72.6 / 107.2 / 146.8 / 176.4 /
206.0 MiB RSS at 20 / 40 / 60 / 80 % / end (37.7 MiB at the first step;
~0.37 KiB a step: about three cache entries a step, each a two-item tuple
key, its datetime and the dict slot) with gc objects 23,853 at the first
step, then 24,174 / 23,668 / 23,847 / 24,030 / 24,215 at the same marks
(nearly flat: the key tuples are untracked by the collector once it has
seen them), 12.7 s for 460,000 steps (~0.028 ms a step); fixed 37.9 / 37.9
/ 37.9 / 37.9 / 37.9 MiB with objects 23,849 / 23,850 / 23,851 / 23,852 /
23,853, 10.3 s. 10-13 s a variant in its process.
"""
import datetime
import math
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/pallets-eco/croniter/issues/182"
SLICE = "holdout20"
STEPS = 460000
FEATURES = 32
LR = 0.05
BATCH = 16
TICK = 0.5
SNAPSHOT_CRON = "*/10 * * * *"
EVAL_CRON = "0 * * * *"
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["datetime", "tuple", "dict"],
              "holder_any": ["TIMESTAMP_TO_DT_CACHE", "croniter"]},
    "fixed": {"verdict_not": "leak"},
}

EPOCH = datetime.datetime(1970, 1, 1)
MARKER = object()
TIMESTAMP_TO_DT_CACHE = {}                                   # croniter 6.0.0's module-level cache


class CronLib:
    """croniter's shape, for minute and hour fields; ``cache`` selects 6.0.0's behaviour."""

    def __init__(self, cache):
        self.cache = cache

    def croniter(self, expr, start_time):
        return _Croniter(self, expr, start_time)


def _expand_field(text, lo, hi):
    if text == "*":
        return list(range(lo, hi + 1))
    if text.startswith("*/"):
        return list(range(lo, hi + 1, int(text[2:])))
    return sorted(int(v) for v in text.split(","))


class _Croniter:
    def __init__(self, lib, expr, start_time):
        fields = expr.split()
        if fields[2:] != ["*", "*", "*"]:
            raise ValueError("stand-in handles minute and hour fields only")
        self.lib = lib
        self.tzinfo = None
        self.minutes = _expand_field(fields[0], 0, 59)
        self.hours = _expand_field(fields[1], 0, 23)
        self.start_time = self.dst_start_time = self.cur = start_time

    def timestamp_to_datetime(self, timestamp, tzinfo=MARKER):
        if tzinfo is MARKER:
            tzinfo = self.tzinfo
        cache = TIMESTAMP_TO_DT_CACHE if self.lib.cache else None
        if cache is not None:
            k = timestamp
            if tzinfo:
                k = (timestamp, repr(tzinfo))
            try:
                return cache[k]
            except KeyError:
                pass
        result = EPOCH + datetime.timedelta(seconds=timestamp)
        if cache is not None:
            cache[(result, repr(result.tzinfo))] = result        # croniter 6.0.0, as released
        return result

    @staticmethod
    def datetime_to_timestamp(d):
        return (d - EPOCH).total_seconds()

    @staticmethod
    def _nearest_diff(x, to_check, range_val):
        for d in to_check:
            if d >= x:
                return d - x
        return to_check[0] - x + range_val

    def _calc(self, now):
        now = math.floor(now)
        d = self.timestamp_to_datetime(now + 60)
        while True:
            diff_hour = self._nearest_diff(d.hour, self.hours, 24)
            if diff_hour:
                d = (d + datetime.timedelta(hours=diff_hour)).replace(minute=0, second=0)
                continue
            diff_min = self._nearest_diff(d.minute, self.minutes, 60)
            if diff_min:
                d = (d + datetime.timedelta(minutes=diff_min)).replace(second=0)
                continue
            return self.datetime_to_timestamp(d.replace(second=0, microsecond=0))

    def get_next(self, ret_type=float):
        result = self._calc(self.cur)
        dtstarttime = self.timestamp_to_datetime(self.dst_start_time)   # DST bookkeeping, as in croniter
        dtresult = self.timestamp_to_datetime(result)
        if dtresult < dtstarttime:
            raise ValueError("next time before start")
        self.cur = result
        return dtresult if ret_type is datetime.datetime else result


def _run(monitor, steps, cache):
    lib = CronLib(cache)
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(FEATURES) / np.sqrt(FEATURES)
    drift = rng.standard_normal(FEATURES) * 1e-5
    x_stream = rng.standard_normal((8192, FEATURES))
    x_eval = rng.standard_normal((256, FEATURES))
    w = np.zeros(FEATURES)
    snapshots = []
    evals = []
    clock = 1_767_225_600.0                                  # simulated wall clock (2026-01-01)
    next_snapshot = next_eval = None
    for step in range(steps):
        i = (step * BATCH) % 8192
        x = x_stream[i:i + BATCH]
        w_true += drift
        y = x @ w_true + 0.05 * np.tanh(x[:, 0])
        err = x @ w - y
        w -= LR * (x.T @ err) / BATCH
        clock += TICK + (step % 7) * 1e-6
        now = EPOCH + datetime.timedelta(seconds=clock)
        if next_snapshot is None or now >= next_snapshot:
            snapshots.append(w.copy())
            del snapshots[:-3]
        if next_eval is None or now >= next_eval:
            evals.append(float(np.mean((x_eval @ w - x_eval @ w_true) ** 2)))
            del evals[:-24]
        next_snapshot = lib.croniter(SNAPSHOT_CRON, clock).get_next(datetime.datetime)
        next_eval = lib.croniter(EVAL_CRON, clock).get_next(datetime.datetime)
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, cache=True)


def fixed(monitor, steps):
    _run(monitor, steps, cache=False)
