"""A ``PyDataset`` validates every crawled record with a pydantic model whose ``field_validator`` rejects malformed fields; the loader's helper keeps the ``ValidationError`` in a local (``err = e``) and raises it after the ``except`` block, so each rejected record leaves a cycle (the error's traceback -> the helper's frame -> ``err``) that runs through pydantic-core's error object, which the cyclic collector cannot see into: every rejected record's frames, tracebacks and errors stay in memory for good (``model.fit`` on a ``PyDataset``; ~5 % of the records, a small, steady leak).

Source: dapper91/pydantic-xml#222 "Severe memory leak": the maintainer
reproduced it "in pure ``pydantic``" with exactly this helper
(``err = None; try: return Company.model_validate(...) except
pd.ValidationError as e: err = e; raise err``) and, after 10,000 calls and
``gc.collect()``, counted 50,000 tracebacks, 30,002 frames, 10,000
``ValueError`` and 10,000 ``ValidationError``: "It looks like the error
traceback leaks when ``pydantic.field_validator`` is used". Fix used here
(the helper's own): re-raise inside the ``except`` block instead of
carrying the error out in a local, so no frame ends up referencing the
error and reference counting frees it.
Summary: a spam/ham classifier on crawled product listings; records
whose country code is longer than two letters are rejected, counted and
replaced by a resample. Checked on pydantic 2.13: the cycle is still
not collected (10 objects a rejected record after ``gc.collect()``).

Here: batches of 64 records, ~5 % rejected, 16 hashed features, a
16-32-1 model, 20 batches an epoch, 200 epochs. The fixed twin
re-raises inside ``except``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, pydantic 2.13, TF 2.21 / Keras 3.15; ``LeakCallback``
replaced by a stub callback): leaky
580.8 / 590.3 / 600.1 / 609.9 / 619.2 MiB RSS at 20 / 40 / 60 / 80 % /
end (~12 KiB a batch) with gc objects 363,735 / 391,704 / 421,610 /
451,067 / 479,706 (~36 a batch, ~10 a rejected record: frames,
tracebacks, the two errors), 15.5 s for 4,000 batches; fixed 571.7 /
571.9 / 571.9 / 571.9 / 572.0 MiB with objects flat (335,177 ->
335,176), 12.8 s.
"""
import os
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pydantic as pd
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/dapper91/pydantic-xml/issues/222"
SLICE = "holdout14"
STEPS = 4000           # batches; 20 per epoch, 200 epochs
STEPS_PER_EPOCH = 20
BATCH = 64
FEATURES = 16
BAD_RATE = 0.05
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["traceback", "frame", "ValidationError", "ValueError"]},
    "fixed": {"verdict_not": "leak"},
}


class Listing(pd.BaseModel):
    title: str
    country: str
    price: float

    @pd.field_validator("country")
    @classmethod
    def two_letters(cls, value):
        if len(value) > 2:
            raise ValueError("country must be of 2 characters")
        return value


def parse_listing_keep_error(raw):
    err = None
    try:
        return Listing.model_validate(raw)
    except pd.ValidationError as e:
        err = e                                   # the leak: the error outlives the except block
    raise err


def parse_listing_reraise(raw):
    try:
        return Listing.model_validate(raw)
    except pd.ValidationError:
        raise                                     # the fix: re-raised where it was caught


class Listings(keras.utils.PyDataset):
    def __init__(self, parse, **kw):
        super().__init__(**kw)
        self.parse = parse
        self.rng = np.random.default_rng(0)
        self.rejected = 0

    def __len__(self):
        return STEPS_PER_EPOCH

    def _raw(self):
        spam = int(self.rng.random() < 0.3)
        country = "USA" if self.rng.random() < BAD_RATE else ("DE", "FR", "US", "JP")[self.rng.integers(0, 4)]
        words = ("free", "deal", "win", "now") if spam else ("used", "bike", "desk", "lamp")
        title = " ".join(words[self.rng.integers(0, 4)] for _ in range(6))
        return {"title": title, "country": country, "price": float(self.rng.gamma(2.0, 40.0))}, spam

    def __getitem__(self, idx):
        x = np.zeros((BATCH, FEATURES), np.float32)
        y = np.zeros((BATCH, 1), np.float32)
        i = 0
        while i < BATCH:
            raw, spam = self._raw()
            try:
                rec = self.parse(raw)
            except pd.ValidationError:
                self.rejected += 1
                continue
            for word in rec.title.split():
                x[i, zlib.crc32(word.encode()) % FEATURES] += 1.0
            x[i, 0] = rec.price / 100.0
            y[i, 0] = spam
            i += 1
        return x, y


def _fit(logdir, steps, parse):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")
    epochs = max(1, steps // STEPS_PER_EPOCH)
    model.fit(Listings(parse), epochs=epochs, verbose=0, callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, parse_listing_keep_error)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, parse_listing_reraise)
