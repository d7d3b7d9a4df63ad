"""A translation model's validation scores every hypothesis with ``sentence_bleu(..., tokenize="spm")``; as in sacrebleu before pull request #299, each call builds a fresh ``BLEU`` object and so a fresh SentencePiece tokenizer that loads its model, and ``TokenizerSPM.__call__`` is decorated with ``lru_cache(maxsize=2**16)`` directly on the method, so the shared cache keys every line on ``(self, line)`` and keeps every tokenizer instance, with its loaded model, for the life of the process; the cache never reaches its 65,536 entries in this run (plain Python + numpy, no TensorFlow; grows every step, ~20 KiB a step, one tokenizer with its piece tables (a 128x8 score array and a 128-entry piece dict)).

Source: mjpost/sacrebleu pull request #299 "fix: stop lru_cache on
TokenizerSPM.__call__ from leaking instances" (merged, closes #264):
"``sentence_bleu()``/``corpus_bleu()`` construct a fresh ``BLEU`` instance —
and therefore a fresh tokenizer instance — on every top-level call ...
``lru_cache`` on a method keys its cache on ``(self, line)`` — so with a fresh
tokenizer instance every call, the shared class-level cache accumulates a
strong reference to every instance (and its loaded
``SentencePieceProcessor``, which holds the full SPM model in memory) ever
created". Fix used here (the PR's): the cache is created per instance in
``__init__`` around a bound method, so it dies with its tokenizer.
Summary: the metric is a stand-in with sacrebleu's shape
(``sentence_bleu(hyp, refs, tokenize)`` -> ``BLEU(tokenize=...)`` ->
``TokenizerSPM()``, whose processor loads a piece table: a numpy score array
and a piece-to-id dict of 128 pieces); BLEU-2 is computed on the pieces. The
"model" is a numpy decoder (a 64x256 forward pass a step) reduced to a noisy copy whose error rate an SGD step on a
scalar parameter lowers; each step decodes and scores one validation
sentence.

Here: 10,000 steps. The fixed tokenizer has a per-instance cache.
"""
import collections
import functools
import math
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/mjpost/sacrebleu/pull/299"
SLICE = "holdout22"
STEPS = 10000
SENTENCES = 1
PIECES = 128
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["TokenizerSPM", "SentencePieceProcessor", "ndarray", "dict"],
              "holder_any": ["__call__", "lru_cache", "cache", "TokenizerSPM"]},
    "fixed": {"verdict_not": "leak"},
}

PER_INSTANCE_CACHE = False


class SentencePieceProcessor:
    def __init__(self, seed=0):
        g = np.random.default_rng(seed)
        self.scores = g.standard_normal((PIECES, 8)).astype(np.float32)      # the model's tables
        self.piece_to_id = {"\u2581w%03d" % i: i for i in range(PIECES)}

    def encode_as_pieces(self, line):
        return ["\u2581" + w for w in line.split()]


class TokenizerSPM:
    def __init__(self):
        self.sp = SentencePieceProcessor()
        if PER_INSTANCE_CACHE:                            # the fix (sacrebleu #299)
            self._cached = functools.lru_cache(maxsize=2 ** 16)(self._tokenize)

    def _tokenize(self, line):
        return " ".join(self.sp.encode_as_pieces(line))

    @functools.lru_cache(maxsize=2 ** 16)
    def _class_cached(self, line):
        return self._tokenize(line)

    def __call__(self, line):
        if PER_INSTANCE_CACHE:
            return self._cached(line)
        return self._class_cached(line)


class BLEU:
    def __init__(self, tokenize="spm"):
        self.tokenizer = TokenizerSPM()

    def sentence_score(self, hyp, refs):
        h = self.tokenizer(hyp).split()
        r = self.tokenizer(refs[0]).split()
        logs = []
        for n in (1, 2):
            hc = collections.Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            rc = collections.Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
            m = sum(min(c, rc[g]) for g, c in hc.items())
            logs.append(math.log((m + 1) / (max(len(h) - n + 1, 0) + 1)))
        return 100 * math.exp(sum(logs) / 2)


def sentence_bleu(hyp, refs, tokenize="spm"):
    return BLEU(tokenize=tokenize).sentence_score(hyp, refs)


def _run(monitor, steps, per_instance):
    global PER_INSTANCE_CACHE
    PER_INSTANCE_CACHE = per_instance
    rng = np.random.default_rng(0)
    theta = 0.0
    enc = rng.standard_normal((64, 256)).astype(np.float32)
    dec = rng.standard_normal((256, 256)).astype(np.float32) / 16
    scores = collections.deque(maxlen=500)
    for step in range(steps):
        err = 1.0 / (1.0 + math.exp(theta))
        hidden = np.tanh(enc @ dec) @ dec                # the decoder's forward pass for the batch
        batch = []
        for _ in range(SENTENCES):
            ref = rng.integers(0, PIECES, int(rng.integers(8, 20)))
            hyp = np.where(rng.random(len(ref)) < err, rng.integers(0, PIECES, len(ref)), ref)
            s = sentence_bleu(" ".join("w%03d" % t for t in hyp), [" ".join("w%03d" % t for t in ref)])
            batch.append(s)
        scores.append(float(np.mean(batch)))
        theta += 0.002 * (1.0 - err)
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, per_instance=False)


def fixed(monitor, steps):
    _run(monitor, steps, per_instance=True)
