"""A TF-IDF featurizer reads document frequencies from a ``defaultdict``, so every unseen token it looks up is inserted (``model.fit`` on a ``PyDataset``).

Source: nltk/nltk#2047 "WordNet: Fix memory leak when unknown lemmas are
looked up" ("this is a read on a defaultdict([]), this will create an entry
with the lemma as a key and the empty list as a value. A long running
program which looks up many different unknown lemmas will eventually run
out of memory"), the gotcha behind PyCQA/flake8-bugbear#323 (a
``defaultdict(int)`` read in a loop: over 900 MB instead of ~19 MB with
``Counter``). Fix from the PR: check for the key before reading (here
``dict.get(token, 0)``; the review's alternative is setting
``default_factory = None`` once the table is built).
Summary: a text classifier trains on a stream of support tickets; the
``PyDataset`` featurizes each batch with TF-IDF weights from a document
frequency table built on a reference corpus. The lookup
``self.doc_freq[token]`` is meant as a read, but the table is a
``defaultdict(int)``, and each ticket carries tokens never seen before
(ticket numbers, user names, URLs), each of which is added for good.

Here: 32 tickets of ~20 tokens a batch, about one never-seen token per
ticket, 512 hashed TF-IDF features, a 512-64-2 MLP, 100 batches an epoch.

Checked without tb-leak (psutil RSS, gc objects, tracemalloc, fresh
process, TF 2.21 / Keras 3.15 / Python 3.11): leaky +8.9 MiB RSS from 20 %
of the run to the end (~3.8 KiB per batch, in steps as the dict resizes;
tracemalloc +3.4 KiB a batch; the ``str`` keys and ``int`` values are not
gc-tracked, so gc objects stay flat), fixed +1.2 MiB RSS, most of it in the
last 40 % (tracemalloc flat: allocator drift of the Keras loop);
~10-14 ms a batch.
"""
import collections
import math
import os
import random

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/nltk/nltk/pull/2047"
SLICE = "holdout5"
STEPS = 3000           # batches; 100 batches per epoch, 30 epochs
STEPS_PER_EPOCH = 100
BATCH = 32
FEATURES = 512
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["str", "dict", "int"],
              "holder_any": ["doc_freq", "TfidfBatches"]},
    "fixed": {"verdict_not": "leak"},
}

_VOCAB = ["w%03d" % i for i in range(400)]


class TfidfBatches(keras.utils.PyDataset):
    def __init__(self, read_with_get, **kwargs):
        super().__init__(**kwargs)
        self.read_with_get = read_with_get
        self.rnd = random.Random(0)
        self.epoch = 0
        self.doc_freq = collections.defaultdict(int)  # built once on a reference corpus
        for _ in range(2000):
            for tok in set(self.rnd.choices(_VOCAB, k=20)):
                self.doc_freq[tok] += 1
        self.n_docs = 2000

    def __len__(self):
        return STEPS_PER_EPOCH

    def _ticket(self, label, serial):
        words = self.rnd.choices(_VOCAB[label * 200:(label + 1) * 200], k=12) + self.rnd.choices(_VOCAB, k=7)
        words.append("ticket-%d" % serial)                        # never seen before
        return words

    def __getitem__(self, idx):
        x = np.zeros((BATCH, FEATURES), dtype=np.float32)
        y = np.zeros(BATCH, dtype=np.int64)
        for i in range(BATCH):
            y[i] = self.rnd.randrange(2)
            serial = ((self.epoch * STEPS_PER_EPOCH + idx) * BATCH + i)
            for tok, tf_count in collections.Counter(self._ticket(int(y[i]), serial)).items():
                if self.read_with_get:
                    df = self.doc_freq.get(tok, 0)                # the fix: a read that does not insert
                else:
                    df = self.doc_freq[tok]                       # inserts tok -> 0 when unseen
                x[i, hash(tok) % FEATURES] += tf_count * math.log(self.n_docs / (1 + df))
        return x, y

    def on_epoch_end(self):
        self.epoch += 1


def _fit(logdir, steps, read_with_get):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input(shape=(FEATURES,)),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(2),
    ])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(TfidfBatches(read_with_get), epochs=max(1, steps // STEPS_PER_EPOCH), verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, read_with_get=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, read_with_get=True)
