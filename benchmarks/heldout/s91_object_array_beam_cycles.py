"""A beam search run on every few training examples keeps each node's children in an object ``ndarray`` whose elements point back to their parent, so every search tree is a reference cycle through an array that the garbage collector cannot see into (no TensorFlow).

Source: numpy/numpy#6581 "Memory leak when array contains circular
references" (``c.arr = np.array([c])``; after ``del c`` and
``gc.collect()`` the object is still alive: "This is because ``PyArray``
doesn't implement ``tp_traverse`` ... but also leads to hard-to-track-down
memory leaks"; a maintainer: "Yes, we should implement tp_traverse"; still
open, after the attempts in numpy/numpy#8303 and #15065). The older
duplicate numpy/numpy#1601 (a ``Lattice`` whose ``empty((n, n),
dtype=object)`` cells hold ``Location(self)``, "it will consume increasing
amounts of memory") gives the fix: "compare with this..", the same cells in
Python lists, whose cycles the collector frees.
Summary: a small numpy sequence model is trained with a sequence-level
reward: every 20th step a beam search (beam 2, top-3 expansions, depth 5)
decodes the current example from the model's state. Each ``BeamNode``
stores its expansions in ``self.children = np.empty(3, dtype=object)`` and
each child keeps ``parent``, so every tree (~30 nodes, each with its
hidden state and scores) is a cycle through object arrays. The search
returns only the best token sequence, yet none of the trees is ever freed:
the collector finds the nodes referenced from arrays it cannot traverse
and keeps them.

Here: a 24-token vocabulary, a 32-unit numpy recurrent cell trained by
one step of truncated backprop per example (~0.15 ms), plus the search on
every 20th step. The fixed twin keeps the children in a list (as in
numpy#1601's comparison), so each tree is a collectable cycle.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky +98.9 MiB RSS
from 20 % of the run to the end (~0.63 KiB a step, ~12.6 KiB a search;
+1.4 gc-tracked objects a step, ``BeamNode``s and their ``__dict__``s,
steady: 79,643 / 135,644 / 303,616 objects at 20 % / 40 % / end), fixed
+0.55 MiB (24,287 / 24,792 / 26,976 objects, cycles waiting for an older-
generation collection); ~0.05 ms a step (9-11 s for 200,000 steps).
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/numpy/numpy/issues/6581"
SLICE = "holdout8"
STEPS = 200000
VOCAB = 24
HIDDEN = 32
BEAM = 2
EXPAND = 3
DEPTH = 5
SEARCH_EVERY = 20
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["BeamNode", "ndarray", "numpy", "dict"]},
    "fixed": {"verdict_not": "leak"},
}


class BeamNode:
    def __init__(self, token, state, logp, parent, children_in_array):
        self.token = token
        self.state = state                       # the decoder's hidden state at this node
        self.logp = logp
        self.parent = parent
        self.children = np.empty(EXPAND, dtype=object) if children_in_array else []

    def add(self, i, child):
        if isinstance(self.children, np.ndarray):
            self.children[i] = child             # child.parent -> self: a cycle through an ndarray
        else:
            self.children.append(child)          # the fix: a list, which the collector can traverse


class TinyRNN:
    def __init__(self, rng):
        self.wx = rng.standard_normal((VOCAB, HIDDEN)) * 0.1
        self.wh = rng.standard_normal((HIDDEN, HIDDEN)) * 0.1
        self.wo = rng.standard_normal((HIDDEN, VOCAB)) * 0.1

    def step(self, token, h):
        h = np.tanh(self.wx[token] + h @ self.wh)
        z = h @ self.wo
        z = z - z.max()
        return h, z - np.log(np.exp(z).sum())

    def train_pair(self, prev, nxt, h, lr=0.05):
        h_new, logp = self.step(prev, h)
        p = np.exp(logp)
        p[nxt] -= 1.0                            # d loss / d logits
        dh = (self.wo @ p) * (1 - h_new * h_new)
        self.wo -= lr * np.outer(h_new, p)
        self.wx[prev] -= lr * dh
        self.wh -= lr * np.outer(h, dh)
        return h_new


def beam_search(model, h0, children_in_array):
    root = BeamNode(0, h0, 0.0, None, children_in_array)
    beam = [root]
    for _ in range(DEPTH):
        candidates = []
        for node in beam:
            h, logp = model.step(node.token, node.state)
            for i, tok in enumerate(np.argsort(logp)[-EXPAND:]):
                child = BeamNode(int(tok), h, node.logp + float(logp[tok]), node, children_in_array)
                node.add(i, child)
                candidates.append(child)
        candidates.sort(key=lambda n: n.logp, reverse=True)
        beam = candidates[:BEAM]
    best, tokens = beam[0], []
    while best.parent is not None:
        tokens.append(best.token)
        best = best.parent
    return tokens[::-1]


def _train(monitor, steps, children_in_array):
    rng = np.random.default_rng(0)
    model = TinyRNN(rng)
    corpus = rng.integers(0, VOCAB, 4096)
    h = np.zeros(HIDDEN)
    for step in range(steps):
        i = step % (len(corpus) - 1)
        h = model.train_pair(int(corpus[i]), int(corpus[i + 1]), h)
        if i % 64 == 0:
            h = np.zeros(HIDDEN)                 # truncated sequences
        if step % SEARCH_EVERY == 0:
            beam_search(model, h, children_in_array)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, children_in_array=True)


def fixed(monitor, steps):
    _train(monitor, steps, children_in_array=False)
