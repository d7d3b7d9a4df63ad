"""A ``tf.function`` forecaster is trained on batches of event logs whose human-written timestamps ("3 hours ago", "12.01.2021 14:03") are parsed with a date parser written like dateparser before pull request #1140, each batch with ``settings={'RELATIVE_BASE': batch_time}``: the locale's class-level caches (``_split_regex_cache``, ``_sorted_words_cache``, ``_split_relative_regex_cache``, ``_sorted_relative_strings_cache``, ``_match_relative_regex_cache``) are keyed by the settings' registry key, so every new ``RELATIVE_BASE`` adds an entry to each and none is ever dropped (TensorFlow ``tf.function``; ~3 KiB a step in ``dict``\s, ``list``\s and ``str``\s).

Source: scrapinghub/dateparser pull request #1140 "fix leak of memory in
cache - add settings.CACHE_SIZE_LIMIT": "After each calling of
``dateparser.parse`` new item is added to cache dictionaries:
``_split_regex_cache = {}``, ``_sorted_words_cache = {}``,
``_split_relative_regex_cache = {}``, ``_sorted_relative_strings_cache =
{}``, ``_match_relative_regex_cache = {}``. After 3000 calls we will found
3000 items in each of dictionaries ... **SOLUTION:** add a limit
(``CACHE_SIZE_LIMIT``) for max items in caches." Fix used here (the
PR's): a ``CACHE_SIZE_LIMIT`` of 3,500 registry keys per cache, oldest
dropped first; it fills at a quarter of the run and holds.
Summary: the parser is a stand-in with dateparser's shape (``Settings``
with a ``registry_key`` built from its values, a ``Locale`` whose
``_get_*`` helpers fill the five class-level caches per registry key with
the split regex, the sorted word list and the relative-date patterns),
handling "N units ago", "today HH:MM" and "DD.MM.YYYY HH:MM". Each step
parses 16 records against the batch's ``RELATIVE_BASE`` (a minute later
every batch), turns them into hour / weekday / age features and takes one
``tf.function`` step of a 12-feature linear model of the event counts.

Here: 14,000 steps. The fixed caches keep at most 3,500 registry keys.
"""
import datetime
import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/scrapinghub/dateparser/pull/1140"
SLICE = "holdout25"
STEPS = 14000
RECORDS = 16
CACHE_SIZE_LIMIT = 3500
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["dict", "list", "str", "Locale"],
              "holder_any": ["_split_regex_cache", "_sorted_words_cache", "_split_relative_regex_cache",
                             "_sorted_relative_strings_cache", "_match_relative_regex_cache", "Locale"]},
    "fixed": {"verdict_not": "leak"},
}

_WORDS = ["ago", "today", "yesterday", "in", "and", "at"] + ["%s%s" % (u, s) for u in
          ("second", "minute", "hour", "day", "week", "month", "year") for s in ("", "s")] + \
         ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday",
          "january", "february", "march", "april", "may", "june", "july", "august", "september",
          "october", "november", "december", "am", "pm", "noon", "midnight", "now", "last", "next"]
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}


class Settings:
    def __init__(self, **values):
        self.values = values
        self.registry_key = "".join("%s%s" % kv for kv in sorted(values.items()))


class Locale:
    shortname = "en"
    cache_size_limit = None
    _split_regex_cache = {}
    _sorted_words_cache = {}
    _split_relative_regex_cache = {}
    _sorted_relative_strings_cache = {}
    _match_relative_regex_cache = {}

    def _store(self, cache, settings, value):
        per_key = cache.setdefault(settings.registry_key, {})
        per_key[self.shortname] = value
        if self.cache_size_limit and len(cache) > self.cache_size_limit:   # the fix (dateparser #1140)
            cache.pop(next(iter(cache)))
        return value

    def _get(self, cache, settings, build):
        hit = cache.get(settings.registry_key, {}).get(self.shortname)
        return hit if hit is not None else self._store(cache, settings, build())

    def _get_sorted_words(self, settings):
        return self._get(self._sorted_words_cache, settings, lambda: sorted(_WORDS, key=lambda w: (-len(w), w)))

    def _get_split_regex(self, settings):
        return self._get(self._split_regex_cache, settings,
                         lambda: "(%s)" % "|".join(re.escape(w) for w in self._get_sorted_words(settings)))

    def _get_sorted_relative_strings(self, settings):
        return self._get(self._sorted_relative_strings_cache, settings,
                         lambda: [w for w in self._get_sorted_words(settings) if w.rstrip("s") in _UNIT_SECONDS])

    def _get_split_relative_regex(self, settings):
        return self._get(self._split_relative_regex_cache, settings,
                         lambda: r"(\d+)\s+(%s)\s+ago" % "|".join(self._get_sorted_relative_strings(settings)))

    def _get_match_relative_regex(self, settings):
        return self._get(self._match_relative_regex_cache, settings,
                         lambda: re.compile(self._get_split_relative_regex(settings)))

    def translate(self, text, settings):
        self._get_split_regex(settings)
        return text.lower().strip()


def parse(text, locale, settings):
    base = settings.values["RELATIVE_BASE"]
    text = locale.translate(text, settings)
    m = locale._get_match_relative_regex(settings).match(text)
    if m:
        return base - datetime.timedelta(seconds=int(m.group(1)) * _UNIT_SECONDS[m.group(2).rstrip("s")])
    m = re.match(r"today (\d\d):(\d\d)", text)
    if m:
        return base.replace(hour=int(m.group(1)), minute=int(m.group(2)))
    return datetime.datetime.strptime(text, "%d.%m.%Y %H:%M")


def _record(rng, base):
    k = int(rng.integers(3))
    if k == 0:
        return "%d %ss ago" % (rng.integers(1, 30), ("minute", "hour", "day")[int(rng.integers(3))])
    if k == 1:
        return "Today %02d:%02d" % (rng.integers(24), rng.integers(60))
    t = base - datetime.timedelta(minutes=int(rng.integers(1, 20000)))
    return t.strftime("%d.%m.%Y %H:%M")


def _run(monitor, steps, limit):
    for name in ("_split_regex_cache", "_sorted_words_cache", "_split_relative_regex_cache",
                 "_sorted_relative_strings_cache", "_match_relative_regex_cache"):
        getattr(Locale, name).clear()
    Locale.cache_size_limit = limit
    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    locale = Locale()
    w = tf.Variable(tf.zeros((12, 1)))
    true_w = rng.standard_normal((12, 1)).astype(np.float32)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        w.assign_sub(0.05 * tape.gradient(loss, w))
        return loss

    start = datetime.datetime(2026, 3, 1, 8, 0)
    for step in range(steps):
        base = start + datetime.timedelta(minutes=step)
        settings = Settings(RELATIVE_BASE=base, PREFER_DATES_FROM="past")
        x = np.zeros((RECORDS, 12), np.float32)
        for i in range(RECORDS):
            t = parse(_record(rng, base), locale, settings)
            x[i, t.hour % 6] = 1.0
            x[i, 6 + t.weekday() % 5] = 1.0
            x[i, 11] = min((base - t).total_seconds() / 86400.0, 10.0) / 10.0
        y = x @ true_w + 0.05 * rng.standard_normal((RECORDS, 1)).astype(np.float32)
        train_step(tf.constant(x), tf.constant(y))
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, limit=None)


def fixed(monitor, steps):
    _run(monitor, steps, limit=CACHE_SIZE_LIMIT)
