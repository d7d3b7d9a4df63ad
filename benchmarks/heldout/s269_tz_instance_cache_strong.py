"""A numpy model of device activity trains on sensor records whose timestamps carry each device's own UTC offset, and fleets with drifting clocks report offsets to the second; the timestamps are parsed with a ``tzoffset`` factory written like dateutil 2.7.0's, which keeps every ``tzoffset`` it has ever built in a class-level instance cache with strong references, so every distinct offset seen (two new ones a step here) stays alive with its ``timedelta`` objects for the rest of the run (plain Python + numpy, no TensorFlow; small: ~1.2 KiB and 2 tracked objects a step).

Source: dateutil/dateutil issue #635 "Switch timezone singletons and caches
with weak references" (closed): "Right now ``tzoffset``, ``tzstr`` and
``tz.gettz`` each retain strong references to every unique time zone ever
constructed by that method ... it could also cause a huge proliferation of
memory in applications that make short-lived references to a large number of
time zones". The fix kept the instance cache as a
``weakref.WeakValueDictionary`` and, in pull request #761 "Add LRU caching to
tzoffset, tzstr and gettz" (merged, closes #691), added a small strong LRU
cache (8 entries) in front of it. Fix used here (the two together): weak
instance cache plus an 8-entry strong LRU.
Summary: the factory is a stand-in with dateutil's shape: ``tzoffset(name,
offset)`` goes through a metaclass ``__call__`` that looks up ``(name,
offset)`` in ``_instances`` and builds a ``tzoffset`` (a ``tzinfo`` with
``_offset`` / ``_name`` and ``utcoffset`` / ``tzname`` / ``dst``) when
missing. Each step parses 126 ISO-8601 records (124 devices in 26 whole-
and half-hour zones, plus two whose clocks have drifted to a new offset), converts them to
UTC and trains a numpy logistic model on hour-of-day features (batches of 126,
plus a 96-feature hidden layer to give the step some weight).

Here: 18,000 steps. The fixed factory uses the weak cache and the strong LRU.
"""
import collections
import datetime
import os
import weakref

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/dateutil/dateutil/issues/635"
SLICE = "holdout23"
STEPS = 18000
BATCH = 126
HIDDEN = 96
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["tzoffset", "timedelta", "tuple"],
              "holder_any": ["_instances", "_TzOffsetFactory", "tzoffset"]},
    "fixed": {"verdict_not": "leak"},
}


class _TzOffsetFactory(type):
    weak = False

    def __init__(cls, *args, **kwargs):
        super().__init__(*args, **kwargs)
        cls.reset(False)

    def reset(cls, weak):
        cls.weak = weak
        cls._instances = weakref.WeakValueDictionary() if weak else {}
        cls._strong_cache = collections.OrderedDict()
        cls._strong_cache_size = 8

    def __call__(cls, name, offset):
        key = (name, offset.total_seconds() if isinstance(offset, datetime.timedelta) else offset)
        instance = cls._instances.get(key)
        if instance is None:
            instance = cls._instances.setdefault(key, type.__call__(cls, name, offset))
        if cls.weak:                                    # dateutil #761: an LRU of strong references
            cls._strong_cache[key] = cls._strong_cache.pop(key, instance)
            if len(cls._strong_cache) > cls._strong_cache_size:
                cls._strong_cache.popitem(last=False)
        return instance


class tzoffset(datetime.tzinfo, metaclass=_TzOffsetFactory):
    def __init__(self, name, offset):
        self._name = name
        try:
            offset = offset.total_seconds()
        except (TypeError, AttributeError):
            pass
        self._offset = datetime.timedelta(seconds=offset)
        self._dst = datetime.timedelta(0)

    def utcoffset(self, dt):
        return self._offset

    def dst(self, dt):
        return self._dst

    def tzname(self, dt):
        return self._name

    def __repr__(self):
        return "tzoffset(%r, %s)" % (self._name, int(self._offset.total_seconds()))


def parse_isoformat(text):
    stamp, sign, rest = text[:19], text[19], text[20:]
    hh, mm, ss = (int(p) for p in rest.split(":"))
    seconds = (hh * 3600 + mm * 60 + ss) * (1 if sign == "+" else -1)
    naive = datetime.datetime(int(stamp[:4]), int(stamp[5:7]), int(stamp[8:10]),
                              int(stamp[11:13]), int(stamp[14:16]), int(stamp[17:19]))
    return naive.replace(tzinfo=tzoffset(None, seconds))


def _fmt(base, seconds):
    sign = "+" if seconds >= 0 else "-"
    s = abs(seconds)
    return "%s%s%02d:%02d:%02d" % (base, sign, s // 3600, (s // 60) % 60, s % 60)


def _run(monitor, steps, weak):
    tzoffset.reset(weak)
    rng = np.random.default_rng(0)
    zones = [3600 * h for h in range(-11, 13)] + [19800, 20700]          # 26 whole/half-hour devices
    w1 = (rng.standard_normal((4, HIDDEN)) * 0.3).astype(np.float64)
    w2 = (rng.standard_normal(HIDDEN) * 0.1).astype(np.float64)
    losses = collections.deque(maxlen=200)
    base_day = datetime.datetime(2026, 3, 1)
    for step in range(steps):
        records = []
        minutes = rng.integers(0, 24 * 60, BATCH)
        for i in range(BATCH):
            local = base_day + datetime.timedelta(minutes=int(minutes[i]))
            base = local.strftime("%Y-%m-%dT%H:%M:%S")
            if i < BATCH - 2:
                seconds = zones[i % len(zones)]
            else:                                       # two drifted device clocks, a new offset each
                seconds = ((step * 2 + i - (BATCH - 2)) % 84000) - 42000
            records.append(_fmt(base, seconds))
        parsed = [parse_isoformat(r) for r in records]
        utc_hours = np.array([(p - p.utcoffset()).hour + (p - p.utcoffset()).minute / 60.0 for p in parsed])
        x = np.stack([np.sin(utc_hours * np.pi / 12), np.cos(utc_hours * np.pi / 12),
                      np.sin(utc_hours * np.pi / 6), np.ones_like(utc_hours)], axis=1)
        y = ((utc_hours > 8) & (utc_hours < 20)).astype(np.float64)
        h = np.tanh(x @ w1)
        p = 1.0 / (1.0 + np.exp(-(h @ w2)))
        losses.append(float(-np.mean(y * np.log(p + 1e-9) + (1 - y) * np.log(1 - p + 1e-9))))
        g = (p - y) / BATCH
        gh = np.outer(g, w2) * (1 - h * h)
        w2 -= 0.1 * (h.T @ g)
        w1 -= 0.1 * (x.T @ gh)
        del parsed
        monitor.sample(step)
    tzoffset.reset(weak)


def leaky(monitor, steps):
    _run(monitor, steps, weak=False)


def fixed(monitor, steps):
    _run(monitor, steps, weak=True)
