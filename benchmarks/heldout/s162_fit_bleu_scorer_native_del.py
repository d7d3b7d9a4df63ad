"""From 40 % of the run a sequence model's callback starts scoring greedy decodes against references every 5 batches with a BLEU scorer that keeps its n-gram tables in a native buffer (``malloc``-ed through ``ctypes``) and frees it in ``__del__``; the ``__del__`` tests ``hasattr(self, '__instance')``, but the attribute is name-mangled to ``_BLEU__instance``, so the check is always false and no scorer ever frees its buffer: the process grows by the table size every evaluation while no Python object accumulates (``model.fit``; native memory only, gc counts flat; late onset).

Source: Danial-Alh/fast-bleu#8 "memory leak": "There is a serious memory
leak, just because the ``__del__`` function of BLEU and SelfBLEU determine
the existence of attributes and functions by wrong name. The original
code is: ``if hasattr(self, '__instance') and hasattr(self,
'__del_instance ')`` ... and it should be ``if hasattr(self,
'_BLEU__instance') and hasattr(self, '_BLEU__del_instance')``"; the
maintainer: "wow, what a bad leak. It was hard to discover it." Fix used
here (the issue's): test the mangled names, so ``__del__`` releases the
native tables.
Summary: a toy copy-task seq2seq (embedding, GRU, per-step softmax)
trained with ``model.fit``; a callback decodes a batch of sequences and
scores them with a fresh ``BLEU(references)`` (the library's usage: one
scorer per reference set) once the curriculum reaches the full length.

Here: batches of 32 sequences of 12 tokens (vocabulary 64), 20 batches
an epoch, 300 epochs; the scorer's tables take 128 KiB of native memory
(``libc.malloc`` + ``memset``). The fixed twin's ``__del__`` frees them.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; ``LeakCallback`` replaced by a
stub callback): leaky
599.5 / 599.6 / 624.3 / 655.3 / 686.2 MiB RSS at 20 / 40 / 60 / 80 % /
end (flat until 40 %, then ~26 KiB a batch: 128 KiB an evaluation) with
gc objects 343,570 / 343,570 / 344,387 / 344,388 / 344,389 (one jump
when the evaluation starts, in both twins: the first eager call of the
model), 41.2 s for 6,000 batches; fixed 599.7 / 600.0 / 600.9 / 601.4 /
601.4 MiB with the same objects, 44.0 s.
"""
import collections
import ctypes
import ctypes.util
import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/Danial-Alh/fast-bleu/issues/8"
SLICE = "holdout14"
STEPS = 6000           # batches; 20 per epoch, 300 epochs
STEPS_PER_EPOCH = 20
BATCH = 32
LENGTH = 12
VOCAB = 64
EVAL_EVERY = 5         # batches
EVAL_FROM = 0.4        # fraction of the epochs before decodes are scored
TABLE_BYTES = 128 * 1024
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "malloc"]},
    "fixed": {"verdict_not": "leak"},
}

_libc = ctypes.CDLL(ctypes.util.find_library("c"))
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_libc.free.argtypes = [ctypes.c_void_p]
_libc.memset.restype = ctypes.c_void_p
_libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]


class BLEU:
    mangled_check = False       # the leaky library checks the unmangled names

    def __init__(self, references, max_n=4):
        self.__instance = _libc.malloc(TABLE_BYTES)              # native n-gram tables
        _libc.memset(self.__instance, 0, TABLE_BYTES)
        self.__del_instance = _libc.free
        self.max_n = max_n
        self.ref_counts = [collections.Counter(tuple(r[i:i + n]) for r in references
                                               for i in range(len(r) - n + 1)) for n in range(1, max_n + 1)]

    def get_score(self, hypotheses):
        logs = []
        for n in range(1, self.max_n + 1):
            hits = total = 0
            for h in hypotheses:
                grams = collections.Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
                hits += sum(min(c, self.ref_counts[n - 1][g]) for g, c in grams.items())
                total += max(1, len(h) - n + 1)
            logs.append(math.log(max(hits, 1) / total))
        return math.exp(sum(logs) / self.max_n)

    def __del__(self):
        if self.mangled_check:
            ok = hasattr(self, "_BLEU__instance") and hasattr(self, "_BLEU__del_instance")   # the fix
        else:
            ok = hasattr(self, "__instance") and hasattr(self, "__del_instance ")           # the leak
        if ok:
            self.__del_instance(self.__instance)


class FixedBLEU(BLEU):
    mangled_check = True


class DecodeBLEU(keras.callbacks.Callback):
    def __init__(self, x_eval, scorer_cls, start_epoch):
        super().__init__()
        self.x_eval = x_eval
        self.scorer_cls = scorer_cls
        self.start_epoch = start_epoch
        self.epoch = 0
        self.scores = collections.deque(maxlen=50)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch < self.start_epoch or batch % EVAL_EVERY:
            return
        pred = np.argmax(self.model(self.x_eval, training=False), axis=-1)
        scorer = self.scorer_cls([list(r) for r in self.x_eval])    # one scorer per reference set
        self.scores.append(scorer.get_score([list(p) for p in pred]))


class CopyTask(keras.utils.PyDataset):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.rng = np.random.default_rng(0)

    def __len__(self):
        return STEPS_PER_EPOCH

    def __getitem__(self, idx):
        x = self.rng.integers(1, VOCAB, (BATCH, LENGTH))
        return x, x


def _fit(logdir, steps, scorer_cls):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((LENGTH,), dtype="int32"), keras.layers.Embedding(VOCAB, 32),
                              keras.layers.GRU(64, return_sequences=True), keras.layers.Dense(VOCAB)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    epochs = max(1, steps // STEPS_PER_EPOCH)
    x_eval = np.random.default_rng(1).integers(1, VOCAB, (16, LENGTH))
    model.fit(CopyTask(), epochs=epochs, verbose=0,
              callbacks=[DecodeBLEU(x_eval, scorer_cls, int(epochs * EVAL_FROM)),
                         tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, BLEU)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, FixedBLEU)
