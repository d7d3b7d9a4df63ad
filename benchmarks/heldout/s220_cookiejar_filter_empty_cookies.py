"""A topic classifier learns online from documents fetched one by one from a corpus service through a small HTTP client with an aiohttp-style ``CookieJar``; before every request the jar's ``filter_cookies(url)`` walks every (domain suffix, path prefix) pair of the URL and reads ``self._cookies[pair]`` from a ``defaultdict(SimpleCookie)``, so each new document URL leaves an empty ``SimpleCookie`` behind for each domain suffix (numpy, no TensorFlow; grows every step, ~3.5 KiB a step).

Source: aio-libs/aiohttp pull request #11054 "Fix CookieJar memory leak in
filter_cookies()" (fixes #11052, "Possible memory leak in the CookieJar"):
"The ``filter_cookies()`` method was inadvertently creating empty cookie
entries for every domain-path combination it checked ... Since
``self._cookies`` is a ``defaultdict(SimpleCookie)``, accessing a
non-existent key creates an empty ``SimpleCookie`` object. These empty
objects accumulate over time, causing the memory leak" ("from ~100MB to
~5GB over weeks of operation"). Fix used here (the PR's): ``if p not in
self._cookies: continue`` before the lookup.
Summary: a 6-topic logistic-regression classifier on 2,048 hashed token
features (plain numpy, SGD, one update per 4 documents); each document is
fetched from ``https://docs.corpus.example.net/v2/shards/<shard>/docs/<id>``
(the transport is simulated: the text is generated from the document id
and its topic); the service sets one session cookie at the start.

Here: 24,000 steps, 4 documents a step. The fixed jar skips pairs that hold
no cookies.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS read before each
object count, at the marks only): leaky 53.9 / 71.2 / 86.1 / 106.0 / 120.8
MiB RSS at 20 / 40 / 60 / 80 % / end (36.7 MiB at the first step; ~3.5 KiB
a step: 12 empty ``SimpleCookie`` objects, one per domain suffix and
document, with their (domain, path) keys in ``CookieJar._cookies``) with
gc objects 24,320 at the first step, then 82,449 / 139,889 / 197,389 /
254,829 / 312,733 at the same marks (12 a step), 13.8 s for 24,000 steps
(~0.58 ms a step); fixed 36.6 / 36.7 / 36.7 / 36.7 / 36.7 MiB with objects
24,296 -> 24,304 (+2 a mark: the check's own records), 11.1 s (~0.46 ms a
step). 11-14 s a variant in its process.
"""
import collections
import itertools
import os
import zlib
from http.cookies import SimpleCookie
from urllib.parse import urlsplit

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/aio-libs/aiohttp/pull/11054"
SLICE = "holdout19"
STEPS = 24000
DOCS_PER_STEP = 4
HASH_DIM = 2048
TOPICS = 6
SHARDS = 64
LR = 0.2
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["SimpleCookie", "Cookie", "dict", "tuple", "str"],
              "holder_any": ["_cookies", "CookieJar", "jar"]},
    "fixed": {"verdict_not": "leak"},
}


class CookieJar:
    """Cookies keyed by (domain, path), as aiohttp's CookieJar keeps them."""

    def __init__(self, skip_missing):
        self._skip_missing = skip_missing
        self._cookies = collections.defaultdict(SimpleCookie)

    def update_cookies(self, cookies, url):
        host = urlsplit(url).hostname
        for name, value in cookies.items():
            self._cookies[(host, "/")][name] = value

    def filter_cookies(self, url):
        filtered = SimpleCookie()
        if not self._cookies:
            return filtered
        parts = urlsplit(url)
        labels = parts.hostname.split(".")
        domains = [".".join(labels[i:]) for i in range(len(labels) - 1)]   # every domain suffix
        paths = list(itertools.accumulate(parts.path.split("/"), lambda a, b: "%s/%s" % (a, b)))
        paths[0] = "/"
        for pair in itertools.product(domains, paths):
            if self._skip_missing and pair not in self._cookies:   # the fix (aiohttp#11054)
                continue
            for name, morsel in self._cookies[pair].items():      # defaultdict: a lookup inserts
                filtered[name] = morsel.value
        return filtered


class CorpusClient:
    def __init__(self, jar, vocab):
        self.jar = jar
        self.vocab = vocab
        self.sent_cookies = 0

    def get(self, url, doc_id):
        cookies = self.jar.filter_cookies(url)
        self.sent_cookies += len(cookies)
        rng = np.random.default_rng(doc_id)                  # the simulated transport
        topic = int(rng.integers(0, TOPICS))
        words = np.concatenate([rng.choice(self.vocab[topic], 40), rng.choice(self.vocab[-1], 30)])
        return topic, " ".join(words)


def _features(text):
    x = np.zeros(HASH_DIM)
    for tok in text.split():
        x[zlib.crc32(tok.encode()) % HASH_DIM] += 1.0
    return x / np.sqrt(x.sum() + 1.0)


def _train(monitor, steps, skip_missing):
    rng = np.random.default_rng(0)
    vocab = [np.array(["t%d_w%d" % (t, i) for i in range(300)]) for t in range(TOPICS)]
    vocab.append(np.array(["common%d" % i for i in range(500)]))
    jar = CookieJar(skip_missing)
    jar.update_cookies({"corpus_session": "a91f03c2e7"}, "https://docs.corpus.example.net/")
    client = CorpusClient(jar, vocab)
    W = np.zeros((HASH_DIM, TOPICS))
    doc_id = 10_000_000
    for step in range(steps):
        xs, ys = [], []
        for _ in range(DOCS_PER_STEP):
            doc_id += int(rng.integers(1, 7))
            shard = doc_id % SHARDS
            url = "https://docs.corpus.example.net/v2/shards/%d/docs/%d" % (shard, doc_id)
            topic, text = client.get(url, doc_id)
            xs.append(_features(text))
            ys.append(topic)
        x = np.stack(xs)
        logits = x @ W
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(len(ys)), ys] -= 1.0
        W -= LR * x.T @ p / len(ys)
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, skip_missing=False)


def fixed(monitor, steps):
    _train(monitor, steps, skip_missing=True)
