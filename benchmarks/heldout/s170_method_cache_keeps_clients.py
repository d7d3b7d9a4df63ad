"""A code-model data loader opens a new repository client per shard and reads files through client methods decorated with ``@functools.cache``; the cache belongs to the function in the class body and its keys include ``self``, so it keeps every shard's client and every file it ever read (and, with a new client per shard, never even gets a hit across shards) for the rest of the run (numpy, no TensorFlow; a burst per shard).

Source: getsentry/seer PR #2512 "fix(autofix): Fix memory leak due to
functools caches": "the memory leak we had in Autofix was due to us
misusing ``functools.cache``/``functools.lru_cache``. When it caches the
arguments it caches *all* the arguments. **This includes the instance of
``self``** This means that we were maintaining a reference to instances
of the repo client ... and if the instance isn't the exact same one we
weren't even getting cache hits"; "To correctly use the cache on class
instance methods you have to pass the 'de-selfed' version within the
constructor." Fix used here (the PR's): ``self.read_file =
functools.cache(self._read_file)`` in ``__init__``, so each client's
cache goes away with the client.
Summary: a character-bigram next-token model (numpy softmax over 96
characters) trained on source files; each shard is a repository whose
client serves 12 files of ~3 KiB, read several times while building
batches.

Here: a shard every 40 steps (1,000 shards), one 256-character window
a step, 40,000 steps. The fixed twin caches per client.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky
43.3 / 50.6 / 57.9 / 65.2 / 72.7 MiB RSS at 20 / 40 / 60 / 80 % / end
(~37 KiB a shard: the client and its 12 cached files) with gc objects
26,343 / 29,072 / 31,798 / 34,531 / 37,248 (~14 a shard), 17.7 s for
40,000 steps; fixed 37.3 / 39.1 / 39.1 / 39.1 / 39.0 MiB with objects
23,928 / 24,054 / 24,180 / 24,306 / 24,335, 18.7 s: each dropped client
is a reference cycle through its own cache (the PR's fix keeps that
shape), freed by the collector's full passes, so the count saw-tooths
(a 100,000-step check: 24,117 / 24,335 / 23,813 / 24,128 / 24,344
objects, 38.2 / 39.1 / 39.7 / 40.0 / 39.8 MiB).
"""
import functools
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/getsentry/seer/pull/2512"
SLICE = "holdout14"
STEPS = 40000
STEPS_PER_SHARD = 40
FILES = 12
FILE_CHARS = 3000
WINDOW = 256
VOCAB = 96
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["RepoClient", "str", "tuple", "dict", "cache"],
              "holder_any": ["read_file", "cache", "RepoClient"]},
    "fixed": {"verdict_not": "leak"},
}

_TOKENS = ("def ", "return ", "self.", "import ", "for ", "in ", "if ", "else:", "(", ")", ":", "\n    ",
           "x", "y", "data", "value", " = ", "+ 1", "[i]", "None")


class RepoClient:
    def __init__(self, repo, rng):
        self.repo = repo
        self.seed = int(rng.integers(0, 2**31))
        self.paths = ["%s/src/mod_%02d.py" % (repo, k) for k in range(FILES)]

    @functools.cache
    def read_file(self, path):                         # the leak: the cache key holds ``self``
        r = np.random.default_rng((self.seed, self.paths.index(path)))
        out, n = [], 0
        while n < FILE_CHARS:
            tok = _TOKENS[int(r.integers(0, len(_TOKENS)))]
            out.append(tok)
            n += len(tok)
        return "".join(out)


class FixedRepoClient(RepoClient):
    def __init__(self, repo, rng):
        super().__init__(repo, rng)
        self.read_file = functools.cache(self._read_file)     # the fix: a cache per client

    def _read_file(self, path):
        return RepoClient.read_file.__wrapped__(self, path)


def _train(monitor, steps, client_cls):
    rng = np.random.default_rng(0)
    w = np.zeros((VOCAB, VOCAB), np.float32)
    client = None
    for step in range(steps):
        if step % STEPS_PER_SHARD == 0:
            client = client_cls("org/repo-%05d" % (step // STEPS_PER_SHARD), rng)
        text = client.read_file(client.paths[int(rng.integers(0, FILES))])
        start = int(rng.integers(0, len(text) - WINDOW - 1))
        codes = np.frombuffer(text[start:start + WINDOW + 1].encode("ascii", "replace"), np.uint8)
        codes = np.clip(codes.astype(np.int64) - 32, 0, VOCAB - 1)
        codes[codes < 0] = 0
        prev, nxt = codes[:-1], codes[1:]
        z = w[prev]
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(WINDOW), nxt] -= 1.0
        np.add.at(w, prev, -0.5 * p / WINDOW)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, RepoClient)


def fixed(monitor, steps):
    _train(monitor, steps, FixedRepoClient)
