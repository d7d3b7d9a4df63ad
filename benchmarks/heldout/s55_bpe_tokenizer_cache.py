"""A GPT-2 style BPE tokenizer's unbounded per-token cache fills with every unique token of a streamed corpus (no TensorFlow).

Source: EleutherAI/gpt-neox#383 "Use lru_cache for GPT2Tokenizer.bpe"
(``GPT2Tokenizer`` keeps an unbounded ``self.cache`` dict from each
pre-token to its BPE merge result; "which will grow to extremely large sizes
(a few million entries according to objgraph) when running
``tools/preprocess_data.py``, leading to massive memory use"), the same
cache as in huggingface/tokenizers#1539 and D-Robotics/rdk_model_zoo#116.
Fix from the PR: a bounded ``functools.lru_cache`` on ``bpe``.
Summary: a training job tokenizes its text on the fly. Common words hit the
cache, but log-like text carries ids, hashes and numbers that never repeat,
and every one of them is added to the tokenizer's cache for good.

Here: a small byte-pair merger (GPT-2's ``bpe`` loop over a merge table),
4 log lines of 10 words a step, 8 never-seen tokens among them (a request
id and a number per line), and a hashed bag-of-pieces logistic-regression
step in numpy. The fixed twin's LRU (10,000 entries) fills in the first
~6 % of the run, then stays flat. Only ``str`` keys and values grow, which
the garbage collector does not track, so ``gc.get_objects()`` stays flat.

Checked without tb-leak (psutil RSS and tracemalloc, fresh process, Python
3.11, numpy 2.4): leaky +20.9 MiB RSS from 20 % of the run to the end
(~1.3 KiB per step; tracemalloc +19.3 MiB), fixed +0.7 MiB RSS
(tracemalloc +0.3 MiB, the checker's own sample arrays); ~0.5 ms a step.
"""
import functools
import os
import random

# Single-threaded BLAS: on 2 shared cores, OpenBLAS worker threads spinning next to other
# threads make each small matmul up to ~10x slower.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/EleutherAI/gpt-neox/pull/383"
SLICE = "holdout5"
STEPS = 20000
LINES = 4
BUCKETS = 2048
CACHE_SIZE = 10000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["str", "dict"],
              "holder_any": ["cache", "GPT2Tokenizer"]},
    "fixed": {"verdict_not": "leak"},
}

_WORDS = ("the model loss step epoch train eval batch user request error warning info debug "
          "server client token layer weight value update gradient checkpoint save load retry "
          "timeout connection opened closed started finished queue worker shard file read write "
          "accuracy learning rate scheduler cache memory device host node job status ok failed").split()


def _get_pairs(word):
    return set(zip(word, word[1:]))


class GPT2Tokenizer:
    """GPT-2's ``bpe``: merge the best-ranked pair until none is left; results cached per token."""

    def __init__(self, bounded=False):
        letters = "etaoinshrdlucmfwypvbgkqjxz0123456789"
        merges = [(a, b) for a in letters[:20] for b in letters[:20]]
        self.bpe_ranks = {pair: i for i, pair in enumerate(merges)}
        self.cache = {}
        if bounded:                                   # the fix: bounded LRU instead of the dict
            self.bpe = functools.lru_cache(maxsize=CACHE_SIZE)(self._merge)

    def _merge(self, token):
        word = tuple(token)
        pairs = _get_pairs(word)
        while pairs:
            bigram = min(pairs, key=lambda p: self.bpe_ranks.get(p, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = _get_pairs(word)
        return " ".join(word)

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = self._merge(token)
        self.cache[token] = word                      # unbounded: one entry per distinct token
        return word

    def encode(self, text):
        ids = []
        for token in text.split():
            ids.extend(hash(piece) % BUCKETS for piece in self.bpe(token).split(" "))
        return ids


def _lines(rnd, step):
    out = []
    for i in range(LINES):
        words = rnd.choices(_WORDS, k=8)
        # ids, hashes and numbers never seen before
        words.append("req%x" % ((step * LINES + i) * 2654435761 % 2 ** 40))
        words.append(str(rnd.randrange(10 ** 6, 10 ** 9)))
        out.append(" ".join(words))
    return out


def _train(monitor, steps, bounded):
    rnd = random.Random(0)
    tok = GPT2Tokenizer(bounded=bounded)
    w = np.zeros(BUCKETS)
    for step in range(steps):
        x = np.stack([np.bincount(tok.encode(line), minlength=BUCKETS) for line in _lines(rnd, step)])
        y = (x[:, :BUCKETS // 2].sum(1) > x[:, BUCKETS // 2:].sum(1)).astype(float)
        p = 1.0 / (1.0 + np.exp(-(x @ w) / 10.0))
        w -= 0.01 * x.T @ (p - y) / LINES
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, bounded=False)


def fixed(monitor, steps):
    _train(monitor, steps, bounded=True)
