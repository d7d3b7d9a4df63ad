"""Once the noisy-label phase starts (after 35 % of the run), the loader silences the expected "label outside the vocabulary" warning of each suspicious sample with ``warnings.filterwarnings("ignore", message=<that sample's text>)``; every call prepends a new filter with its own compiled pattern to the process-wide ``warnings.filters`` list, which is never trimmed (no TensorFlow; late onset; small and slow).

Source: xability/py-maidr#326 "Every patched plot call appends another
entry to warnings.filters" ("``filterwarnings`` prepends to the global
``warnings.filters`` list and never clears prior entries, so a session
that draws many plots ... accumulates ... filter entries without bound.
Every subsequent ``warnings.warn`` then walks a list that keeps growing";
the fix discussed there: scope the suppression with
``warnings.catch_warnings()``), JarryShaw/PyPCAPKit#364 (identical
entries are de-duplicated by ``_add_filter``'s remove-then-insert, so
only *distinct* filters grow the list: "+21 for 23 distinct subclasses"),
and python/cpython#97557 "Memory leak: warnings module" (warnings whose
text changes in a loop). Fix: wrap the call in
``with warnings.catch_warnings(): warnings.simplefilter("ignore", LabelWarning)``,
which restores ``warnings.filters`` on exit.
Summary: a numpy classifier reads (features, label string) records. From
35 % of the run a second, crowd-labelled source is mixed in; about one
record in three has a label outside the vocabulary, and the decoder warns
about it with the record's id in the text. The loader "knows" these are
expected and, before decoding, silences exactly that message with
``warnings.filterwarnings("ignore", message=re.escape(text))``. Each call
compiles a pattern and inserts a 5-tuple at the head of
``warnings.filters``: a few hundred bytes per noisy record, never removed.

Here: batches of 64 x 128 float32 features from 10 classes; from 35 % on, two crowd records a step, about a third of them noisy.
The fixed twin scopes the suppression with ``catch_warnings``.

Checked without tb-leak (psutil RSS, gc objects, tracemalloc; fresh
process, Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky
41.7 / 45.6 / 94.4 MiB RSS at 20 % / 40 % / end (+48.8 MiB after 40 %,
~0.9 KiB a step, ~1.4 KiB a noisy record), tracemalloc 7.2 / 10.3 / 47.1
MiB (~0.7 KiB a step) and gc objects 23,656 / 29,534 / 100,322 (+1.3 a
step: the filter tuples and compiled patterns); fixed 41.7 / 41.8 / 41.8
MiB, tracemalloc 7.2 MiB flat, objects 23,656 / 23,660 / 23,660. The leaky
step time grows from ~0.09 ms to ~1 ms as each ``warn`` walks the longer
list: 43.5 s leaky and 10.7 s fixed for 90,000 steps through
``run_heldout.py --child`` (the fixed twin ~0.09 ms a step, 8.4 s under
the stand-in monitor without tracemalloc).
"""
import os
import re
import warnings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/xability/py-maidr/issues/326"
SLICE = "holdout10"
STEPS = 90000
NOISY_START = 0.35        # the crowd-labelled source is mixed in after this fraction of the run
BATCH = 64
FEATURES = 128
CLASSES = 10
VOCAB = ["class-%d" % i for i in range(CLASSES)]
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["tuple", "Pattern", "re.", "str", "warnings", "filters"],
              "holder_any": ["filters", "warnings"]},
    "fixed": {"verdict_not": "leak"},
}


class LabelWarning(UserWarning):
    pass


def _decode_label(record_id, text):
    if text not in VOCAB:
        warnings.warn("record %s: label %r is not in the vocabulary, mapped to 0" % (record_id, text), LabelWarning)
        return 0
    return VOCAB.index(text)


def _decode_quietly(record_id, text, scoped):
    if text in VOCAB:
        return VOCAB.index(text)
    message = "record %s: label %r is not in the vocabulary, mapped to 0" % (record_id, text)
    if scoped:
        with warnings.catch_warnings():                      # the fix: filters restored on exit
            warnings.simplefilter("ignore", LabelWarning)
            return _decode_label(record_id, text)
    warnings.filterwarnings("ignore", message=re.escape(message), category=LabelWarning)   # the leak
    return _decode_label(record_id, text)


def _train(monitor, steps, scoped):
    if True:
        rng = np.random.default_rng(0)
        centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
        w = np.zeros((FEATURES, CLASSES), np.float32)
        noisy_start = int(steps * NOISY_START)
        for step in range(steps):
            y = rng.integers(0, CLASSES, BATCH)
            x = centers[y] + rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
            if step >= noisy_start:
                extra_x, extra_y = [], []
                for k in range(2):
                    cls = int(rng.integers(CLASSES))
                    text = VOCAB[cls] if rng.random() > 0.33 else "crowd-%d-%d" % (cls, rng.integers(1000))
                    extra_y.append(_decode_quietly("crowd-%08d-%d" % (step, k), text, scoped))
                    extra_x.append(centers[cls] + rng.standard_normal(FEATURES, dtype=np.float32))
                x = np.concatenate([x, np.stack(extra_x)])
                y = np.concatenate([y, extra_y])
            z = x @ w
            z -= z.max(1, keepdims=True)
            p = np.exp(z)
            p /= p.sum(1, keepdims=True)
            p[np.arange(len(y)), y] -= 1.0
            w -= 0.05 * (x.T @ p) / len(y)
            monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, scoped=False)


def fixed(monitor, steps):
    _train(monitor, steps, scoped=True)
