"""A tweet-sentiment model trained on a live stream tokenizes with a module-level spaCy-style ``NLP`` pipeline whose ``Vocab`` interns every new surface form as a ``Lexeme`` (with its lower, norm, shape, prefix and suffix strings in the ``StringStore``); hashtags, mentions, URLs and numbers keep producing new forms, so the shared vocabulary gains a few dozen lexemes and a hundred strings every batch and never lets them go (``tf.function`` train step; grows every step, many small objects).

Source: explosion/spaCy pull request #13621 "Support 'memory zones' for
user memory management": "spaCy creates and stores Lexeme objects in the
Vocab that can be shared between multiple Doc objects. It also interns
strings. Normally, spaCy can't know when all Doc objects using a Lexeme are
out-of-scope, so new Lexemes accumulate in the vocab, causing memory
pressure. Memory zones solve this problem ... This lets spaCy free all new
Lexeme objects and other data that were created during the block" (the
streaming growth first reported in #285 and #5083: "for streaming text,
especially for social media where new terms are invented by the minute
(hashtags and URLs in particular) ... the spacy vocabulary storage
represents a dynamic element"). Fix used here (the PR's): each batch is
tokenized inside ``with NLP.memory_zone():``.
Summary: synthetic tweets of 16 tokens: 12 common words (a 3,000-word
base vocabulary with a sentiment lexicon) and a hashtag, a mention, a
short URL and a number, each new with probability 0.2 (one token in
twenty overall, ~26 new forms a batch); token ids are hashed into 2**16
rows of an embedding bag (``Embedding`` 32-d, mean pooled, ``Dense`` 1),
trained on batches of 32 tweets with Adam in a ``tf.function``.

Here: 3,000 steps. The fixed loop tokenizes each batch in a memory zone,
so the vocabulary keeps only its 3,000 base words.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``):
leaky 619.6 / 629.6 / 638.4 / 647.0 / 653.2 MiB RSS at 20 / 40 / 60 / 80 %
/ end (~14 KiB a step: ~26 lexemes and their ~100 interned strings) with
gc objects 341,966 / 357,398 / 372,425 / 387,818 / 403,165 (~26 a step:
the lexemes), 21.0 s for 3,000 steps (~7 ms a step); fixed 602.8 / 605.1 /
605.5 / 605.5 / 605.5 MiB with objects 326,620 -> 326,622, 19.2 s.
"""
import contextlib
import os
import re
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/explosion/spaCy/pull/13621"
SLICE = "holdout17"
STEPS = 3000
BATCH = 32
TOKENS = 16
BASE_WORDS = 3000
HASH_ROWS = 2 ** 16
EMBED = 32
NEW_TOKEN_RATE = 0.05
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Lexeme", "str", "dict"],
              "holder_any": ["NLP", "vocab", "_by_orth", "strings", "Vocab"]},
    "fixed": {"verdict_not": "leak"},
}


def _hash(text):
    return zlib.crc32(text.encode()) | (len(text) << 32)


class StringStore:
    def __init__(self):
        self._map = {}
        self._transient = []

    def add(self, text, transient=False):
        key = _hash(text)
        if key not in self._map:
            self._map[key] = text
            if transient:
                self._transient.append(key)
        return key

    def _clear_transient(self):
        for key in self._transient:
            self._map.pop(key, None)
        self._transient = []


def _shape(text):
    out = re.sub("[A-Z]", "X", re.sub("[a-z]", "x", re.sub("[0-9]", "d", text)))
    return re.sub(r"(.)\1{4,}", r"\1\1\1\1", out)


class Lexeme:
    __slots__ = ("orth", "lower", "norm", "shape", "prefix", "suffix", "length", "flags")

    def __init__(self, vocab, text, transient):
        add = vocab.strings.add
        self.orth = add(text, transient)
        self.lower = add(text.lower(), transient)
        self.norm = add(text.lower().lstrip("#@"), transient)
        self.shape = add(_shape(text), transient)
        self.prefix = add(text[:1], transient)
        self.suffix = add(text[-3:], transient)
        self.length = len(text)
        self.flags = (text.isalpha() << 0) | (text.isdigit() << 1) | (text.startswith("#") << 2) \
            | (text.startswith("@") << 3) | (text.startswith("http") << 4)


class Vocab:
    def __init__(self):
        self.strings = StringStore()
        self._by_orth = {}
        self._in_zone = False
        self._transient_orths = []

    def get(self, text):
        orth = _hash(text)
        lex = self._by_orth.get(orth)
        if lex is None:
            lex = Lexeme(self, text, self._in_zone)
            self._by_orth[orth] = lex                        # the leak outside a memory zone
            if self._in_zone:
                self._transient_orths.append(orth)
        return lex

    @contextlib.contextmanager
    def memory_zone(self):
        self._in_zone = True
        try:
            yield
        finally:
            self._in_zone = False
            for orth in self._transient_orths:               # the fix: free what the zone created
                self._by_orth.pop(orth, None)
            self._transient_orths = []
            self.strings._clear_transient()


class Language:
    def __init__(self):
        self.vocab = Vocab()

    def memory_zone(self):
        return self.vocab.memory_zone()

    def __call__(self, text):
        return [self.vocab.get(tok) for tok in text.split()]


NLP = Language()                                              # module-level pipeline, as usual


class TweetStream:
    def __init__(self, rng):
        self.rng = rng
        self.words = ["w%04d%s" % (i, "abcdefgh"[i % 8] * (1 + i % 5)) for i in range(BASE_WORDS)]
        self.polarity = rng.normal(0, 1, BASE_WORDS) * (rng.random(BASE_WORDS) < 0.1)
        self.fresh = 0
        self.recent = ["#launch", "@news", "https://t.co/a1", "2024"]

    def _novel(self):
        self.fresh += 1
        kind = self.fresh % 4
        tok = ("#trend%07d" % self.fresh, "@user%07d" % self.fresh,
               "https://t.co/%08x" % (self.fresh * 2654435761 % 2 ** 32), "%d" % (self.fresh * 7919))[kind]
        self.recent[kind] = tok
        return tok

    def tweet(self):
        idx = self.rng.integers(BASE_WORDS, size=TOKENS)
        toks = [self.words[i] for i in idx]
        for j in range(TOKENS - 4, TOKENS):
            if self.rng.random() < NEW_TOKEN_RATE * 4:
                toks[j] = self._novel()
            else:
                toks[j] = self.recent[j % 4]
        label = float(self.polarity[idx].sum() + 0.3 * self.rng.standard_normal() > 0)
        return " ".join(toks), label


def _train(monitor, steps, memory_zone):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    stream = TweetStream(rng)
    for word in stream.words:                                 # the base vocabulary, loaded once
        NLP.vocab.get(word)
    emb = keras.layers.Embedding(HASH_ROWS, EMBED)
    head = keras.layers.Dense(1)
    model = keras.Sequential([keras.Input((TOKENS,), dtype="int32"), emb,
                              keras.layers.GlobalAveragePooling1D(), head])
    opt = keras.optimizers.Adam(1e-3)
    bce = keras.losses.BinaryCrossentropy(from_logits=True)

    @tf.function(input_signature=[tf.TensorSpec((None, TOKENS), tf.int32), tf.TensorSpec((None, 1), tf.float32)])
    def train_step(ids, y):
        with tf.GradientTape() as tape:
            loss = bce(y, model(ids, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for step in range(steps):
        zone = NLP.memory_zone() if memory_zone else contextlib.nullcontext()
        with zone:
            ids = np.zeros((BATCH, TOKENS), np.int32)
            y = np.zeros((BATCH, 1), np.float32)
            for i in range(BATCH):
                text, y[i, 0] = stream.tweet()
                doc = NLP(text)
                ids[i] = [lex.orth % HASH_ROWS for lex in doc]
            train_step(tf.constant(ids), tf.constant(y))
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, memory_zone=False)


def fixed(monitor, steps):
    _train(monitor, steps, memory_zone=True)
