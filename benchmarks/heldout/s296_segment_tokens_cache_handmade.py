"""An eager TensorFlow relation classifier is trained on rule features computed over document segments, with the segments' enriched tokens memoised by a hand-made cache written like iepy's ``rules.py`` before issue #65 was fixed: ``cached_segment_enriched_tokens`` keeps every segment's token tuples in a module-level dict keyed by segment id and never drops any, so each new segment the stream brings leaves its tokens behind (TensorFlow eager; ~4 KiB a step in a ``list`` of ``tuple``\s of ``str``).

Source: machinalis/iepy issue #65 "Memory usage of rules.py" (closed,
fixed-on-develop): "rules.py has a number of caches for performance. At
least one of this caches is still prone to memory 'leaks'[0], namely:
cached_segment_enriched_tokens ... [0] Unlimited caching more precisely".
Resolution: "I commited a fix for this replacing a hand made cache with a
``lru_cache`` with a limited memory." Fix used here (that one):
``functools.lru_cache(maxsize=1500)``, which fills at a quarter of the run
and holds.
Summary: segments and the tokenizer are stand-ins (a segment is 24
tokens drawn from a 3,000-word vocabulary; "enrichment" makes ``(token,
lemma, pos, ner)`` tuples); the rules score entity-pair patterns into 32
features. Each step takes the stream's next segment and re-reads three
recent ones (so the cache hits), and one eager ``GradientTape`` step
(plain SGD) trains a 32-16-1 classifier on the four segments' features.

Here: 6,000 steps. The fixed cache is an LRU of 1,500 segments.
"""
import functools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/machinalis/iepy/issues/65"
SLICE = "holdout25"
STEPS = 6000
TOKENS = 24
VOCAB = 3000
LRU_SIZE = 1500
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["tuple", "str", "list"],
              "holder_any": ["_segment_tokens_cache", "cached_segment_enriched_tokens"]},
    "fixed": {"verdict_not": "leak"},
}

_POS = ("NN", "NNP", "VB", "VBD", "IN", "DT", "JJ")
_NER = ("O", "O", "O", "PERSON", "ORG", "DATE")


class Segment:
    def __init__(self, segment_id, word_ids):
        self.id = segment_id
        self.word_ids = word_ids


def _enrich(segment):
    toks = []
    for i, wid in enumerate(segment.word_ids):
        word = "w%04d" % wid
        toks.append((word, word.lower() + "_l", _POS[wid % 7], _NER[(wid + i) % 6]))
    return toks


_segment_tokens_cache = {}


def cached_segment_enriched_tokens(segment):
    """iepy's hand-made cache: keyed by segment id, never evicted."""
    key = segment.id
    if key not in _segment_tokens_cache:
        _segment_tokens_cache[key] = _enrich(segment)
    return _segment_tokens_cache[key]


def _make_lru(segments_by_id):
    @functools.lru_cache(maxsize=LRU_SIZE)                       # the fix (iepy #65)
    def cached(segment_id):
        return _enrich(segments_by_id[segment_id])
    return lambda segment: cached(segment.id)


def _features(tokens):
    f = np.zeros(32, np.float32)
    for i, (word, lemma, pos, ner) in enumerate(tokens):
        f[(hash(pos) + 7 * (ner != "O")) % 16] += 1.0
        if ner != "O" and i + 1 < len(tokens) and tokens[i + 1][2].startswith("VB"):
            f[16 + (hash(lemma) % 16)] += 1.0
    return f / len(tokens)


def _run(monitor, steps, bounded):
    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    _segment_tokens_cache.clear()
    recent = {}
    get_tokens = _make_lru(recent) if bounded else cached_segment_enriched_tokens
    w1 = tf.Variable(tf.random.normal((32, 16), stddev=0.2))
    w2 = tf.Variable(tf.random.normal((16, 1), stddev=0.2))
    params = [w1, w2]
    order = []
    for step in range(steps):
        seg = Segment(step, rng.integers(0, VOCAB, TOKENS))
        recent[seg.id] = seg
        order.append(seg.id)
        if len(order) > 64:
            recent.pop(order.pop(0))
        batch = [seg] + [recent[order[int(i)]] for i in rng.integers(0, len(order), 3)]
        x = np.stack([_features(get_tokens(s)) for s in batch])
        y = (x[:, 16:].sum(1, keepdims=True) > 0.05).astype(np.float32)
        with tf.GradientTape() as tape:
            logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
        for p, g in zip(params, tape.gradient(loss, params)):
            p.assign_sub(0.05 * g)
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, bounded=False)


def fixed(monitor, steps):
    _run(monitor, steps, bounded=True)
