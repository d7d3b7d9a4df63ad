"""A Keras text classifier trains with ``model.fit`` on a ``PyDataset`` that streams sharded text and builds a fresh BPE tokenizer for every shard (each shard names its own BPE model file); like pyonmttok between 1.12.0 and the patch that followed OpenNMT/Tokenizer issue #130, building a tokenizer with a BPE model allocates the merge table in native memory that deleting the tokenizer does not release, so every shard leaves ~2 MiB in the C heap (``model.fit`` on a ``PyDataset`` + ``LeakCallback``; native memory only, no Python object grows; grows in steps, once every 40 batches).

Source: OpenNMT/Tokenizer issue #130 "Memory leak when using python wrapper?"
(closed): "When building a ``pyonmttok.Tokenizer`` several times, it appears
memory usage is increasing. Even when deleting the object (and calling
``gc.collect()``) before recreating the new one ... Memory usage increases
approx. 100MB every 10 iterations." Maintainer: "I can reproduce this when
setting a BPE model ... the regression was introduced in version 1.12.0 (May
2019) and concerned tokenizers with BPE or SentencePiece models. I will push a
patch version shortly with the fix." Fix used here (the patch release's): the
tokenizer's native BPE model is freed when the tokenizer is deleted, so each
shard's table is allocated and released (allocator churn, no growth).
Summary: the tokenizer is a stand-in with pyonmttok's shape
(``Tokenizer(mode="aggressive", bpe_model_path=...)``, ``tokenize(text)``);
its native side is a ``ctypes`` ``malloc`` of the merge table (filled, so it
is resident) and, in the fixed build, a ``free`` in ``__del__``. The
``PyDataset`` (100 batches an epoch, 40 per shard) tokenizes 64 synthetic
sentences a batch into padded id sequences of length 24. The model is a
Keras embedding (2,000 x 32), global average pooling and a 4-way head,
trained with Adam.

Here: 4,000 batches (40 epochs, 100 shards). The fixed tokenizer frees its
BPE table.
"""
import ctypes
import ctypes.util
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/OpenNMT/Tokenizer/issues/130"
SLICE = "holdout23"
STEPS = 4000            # batches; 100 per epoch, 40 epochs
PER_EPOCH = 100
PER_SHARD = 40
BATCH = 64
LENGTH = 24
VOCAB = 2000
CLASSES = 4
TABLE_BYTES = 2 * 1024 * 1024
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "malloc", "heap", "unexplained"]},
    "fixed": {"verdict_not": "leak"},
}

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]
_libc.memset.restype = ctypes.c_void_p
_libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]

_WORDS = ["w%04d" % i for i in range(VOCAB - 2)]


class Tokenizer:
    """pyonmttok-like wrapper; the BPE merge table lives in native memory."""
    release_native = True

    def __init__(self, mode, bpe_model_path):
        self.mode = mode
        self.bpe_model_path = bpe_model_path
        self._table = _libc.malloc(TABLE_BYTES)
        _libc.memset(self._table, len(bpe_model_path) & 0xFF, TABLE_BYTES)
        self._vocab = {w: i + 2 for i, w in enumerate(_WORDS)}

    def tokenize(self, text):
        return [self._vocab.get(w, 1) for w in text.split()]

    def __del__(self):
        if self.release_native and self._table:            # the patch release frees the model
            _libc.free(self._table)
            self._table = None


class ShardedText(keras.utils.PyDataset):
    def __init__(self, seed=0):
        super().__init__()
        self.rng = np.random.default_rng(seed)
        self.shard = -1
        self.tokenizer = None
        self.batches = 0

    def __len__(self):
        return PER_EPOCH

    def __getitem__(self, index):
        shard = self.batches // PER_SHARD
        if shard != self.shard:
            self.shard = shard
            self.tokenizer = None
            self.tokenizer = Tokenizer("aggressive", bpe_model_path="shards/%05d/bpe.model" % shard)
        self.batches += 1
        y = self.rng.integers(0, CLASSES, BATCH)
        ids = np.zeros((BATCH, LENGTH), np.int32)
        for i in range(BATCH):
            n = int(self.rng.integers(8, LENGTH + 1))
            words = self.rng.integers(0, len(_WORDS), n)
            words[: n // 3] = (words[: n // 3] // 100) * 100 + y[i] * 7        # a label signal
            toks = self.tokenizer.tokenize(" ".join(_WORDS[w] for w in words))
            ids[i, :len(toks)] = toks
        return ids, y.astype(np.int32)


def _fit(logdir, steps, release):
    Tokenizer.release_native = release
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((LENGTH,), dtype="int32"), keras.layers.Embedding(VOCAB, 32),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer=keras.optimizers.Adam(2e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(ShardedText(), epochs=max(1, steps // PER_EPOCH), verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, release=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, release=True)
