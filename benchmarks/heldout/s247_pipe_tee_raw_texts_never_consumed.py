"""A support-ticket router trains online from an endless ticket stream passed through an NLP pipeline's ``pipe()``; like spaCy's ``Language.pipe`` before pull request #5101, ``pipe`` starts with ``texts, raw_texts = itertools.tee(texts)`` ("raw_texts will be used later to stop iterator") but the single-process path never reads ``raw_texts``, so the tee keeps every ticket text it has handed out in its linked buffers for as long as the stream runs (plain Python + numpy, no TensorFlow; grows every step, ~0.8 KiB a step: one ticket string and its tuple each, plus the tee's link blocks every 57 texts; gc object counts stay nearly flat).

Source: explosion/spaCy pull request #5101 "Remove unnecessary iterator in
Language.pipe" (merged): "Remove iterator over ``raw_texts`` with
``iterator.tee()`` in ``Language.pipe`` that is never consumed and consumes
memory unnecessarily. Addresses part of issue in #5083." Fix used here (the
PR's): ``pipe`` no longer tees its input; only the multiprocessing path,
which does read ``raw_texts``, keeps its own tee.
Summary: the pipeline is a stand-in with ``Language.pipe``'s shape at the
time (``as_tuples`` handling, ``component_cfg``, per-component
``functools.partial`` pipes, ``make_doc`` per text, ``n_process=1`` path),
with a tokenizer and a hashed bag-of-words featurizer as components. The
stream yields tickets of 40-120 words drawn from a 400-word vocabulary with
a route label; each step takes one doc from ``pipe`` and takes an SGD step
of a 4-way softmax over 2,048 hashed features (sparse update). A bounded
deque keeps the last 1,000 predictions for the routing dashboard, in both
variants.

Here: 80,000 steps. The fixed ``pipe`` does not tee its input.

Checked without tb-leak (psutil RSS, gc objects, tracemalloc; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS read before each
object count, at the marks only): leaky 50.1 / 62.8 / 75.5 / 88.2 / 100.9
MiB RSS at 20 / 40 / 60 / 80 % / end (37.4 MiB at the first step; ~0.8 KiB a
step: one ticket text and its ``(text, route)`` tuple a step, in the tee's
57-item link blocks) with gc objects 25,376 at the first step, then 25,780 /
26,251 / 26,621 / 27,096 / 27,567 at the same marks (about one link block
per 57 steps; the tuples and strings are not tracked), 21.0 s for 80,000
steps (~0.26 ms a step); under tracemalloc 8.35 MiB traced at the first step
and 67.15 MiB at the end (~0.75 KiB a step); fixed 37.9 / 37.9 / 37.9 / 37.9
/ 37.9 MiB with objects 25,414 / 25,399 / 25,384 / 25,426 / 25,411 and 8.35
-> 8.37 MiB traced, 19.5 s. 20-21 s a variant in its process.
"""
import collections
import functools
import itertools
import os
import zlib

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/explosion/spaCy/pull/5101"
SLICE = "holdout21"
STEPS = 80000
VOCAB = 400
FEATURES = 2048
ROUTES = 4
LR = 0.1
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["str", "tuple", "tee", "_tee"],
              "holder_any": ["raw_texts", "tee", "pipe", "teedataobject"]},
    "fixed": {"verdict_not": "leak"},
}

_WORDS = ["w%03d%s" % (i, "abcdefgh"[i % 8] * (1 + i % 5)) for i in range(VOCAB)]


class Doc:
    __slots__ = ("text", "words", "features")

    def __init__(self, text, words):
        self.text = text
        self.words = words
        self.features = None


def _pipe(docs, proc, kwargs):
    for doc in docs:
        yield proc(doc, **kwargs)


def featurize(doc, n_features=FEATURES):
    idx = np.fromiter((zlib.crc32(w.encode()) % n_features for w in doc.words), dtype=np.int64,
                      count=len(doc.words))
    doc.features = np.unique(idx)
    return doc


class Language:
    def __init__(self, tee_input):
        self.tee_input = tee_input
        self.pipeline = [("featurizer", featurize)]

    def make_doc(self, text):
        return Doc(text, text.split())

    def pipe(self, texts, as_tuples=False, batch_size=1000, disable=(), component_cfg=None, n_process=1):
        if self.tee_input:
            # raw_texts will be used later to stop iterator.
            texts, raw_texts = itertools.tee(texts)          # removed by spaCy #5101
        if as_tuples:
            text_context1, text_context2 = itertools.tee(texts)
            texts = (tc[0] for tc in text_context1)
            contexts = (tc[1] for tc in text_context2)
            docs = self.pipe(texts, batch_size=batch_size, disable=disable, component_cfg=component_cfg)
            for doc, context in zip(docs, contexts):
                yield (doc, context)
            return
        if component_cfg is None:
            component_cfg = {}
        pipes = []
        for name, proc in self.pipeline:
            if name in disable:
                continue
            kwargs = component_cfg.get(name, {})
            pipes.append(functools.partial(_pipe, proc=proc, kwargs=kwargs))
        docs = (self.make_doc(text) for text in texts)
        for pipe in pipes:
            docs = pipe(docs)
        for doc in docs:
            yield doc


def _ticket_stream(seed):
    rng = np.random.default_rng(seed)
    topic_words = rng.integers(0, VOCAB, size=(ROUTES, 30))
    n = 0
    while True:
        route = int(rng.integers(ROUTES))
        length = int(rng.integers(40, 121))
        ids = rng.integers(0, VOCAB, length)
        mask = rng.random(length) < 0.3
        ids[mask] = rng.choice(topic_words[route], int(mask.sum()))
        yield ("ticket %d: " % n + " ".join(_WORDS[i] for i in ids), route)
        n += 1


def _run(monitor, steps, tee_input):
    nlp = Language(tee_input)
    W = np.zeros((FEATURES, ROUTES))
    recent = collections.deque(maxlen=1000)
    for step, (doc, route) in enumerate(nlp.pipe(_ticket_stream(0), as_tuples=True)):
        if step >= steps:
            break
        rows = W[doc.features]
        logits = rows.sum(axis=0)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        grad = p.copy()
        grad[route] -= 1.0
        W[doc.features] -= LR * grad / np.sqrt(len(doc.features))
        recent.append(int(p.argmax() == route))
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, tee_input=True)


def fixed(monitor, steps):
    _run(monitor, steps, tee_input=False)
