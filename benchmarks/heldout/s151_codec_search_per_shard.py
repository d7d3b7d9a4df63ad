"""A text loader reads legacy transcript shards, each written in its recording site's own 8-bit code page (a 256-character table shipped with the shard), and makes each table decodable by ``codecs.register``-ing a search function for that shard's codec name; nothing ever unregisters them, so the interpreter's codec search path keeps every shard's search function (a closure over its ``CodecInfo`` and tables) and the codec lookup cache keeps every shard's ``CodecInfo`` (no TensorFlow; small, slow leak).

Source: python/cpython#86008 (bpo-41842) "Add codecs.unregister() to
unregister a codec search function" and its PR #22360: until Python
3.10 "there's no way to unregister a codec search function" (the
comment quoted from ``test_codecs.py``), so every registered function
stays on ``interp->codec_search_path`` and every name looked up through
it stays in ``interp->codec_search_cache``; the old python-dev request
for ``codecs.unregister()`` is linked from the thread. Fix used here
(the API the issue added): ``codecs.unregister(search)`` once the shard
is decoded, which also clears the lookup cache.
Summary: a character-n-gram language-ID classifier streams transcript
shards from field sites that each used their own code page; every
shard's lines are decoded with ``raw.decode(codec_name)`` after its
table has been registered.

Here: a shard every 4 steps (15,000 shards), 48 lines of 48 bytes a
step decoded and hashed into 64 character buckets, a 64-16 softmax
classifier in numpy. Every new codec name is looked up by calling the
registered search functions in order, so the leaky run's step time also
grows with the number of shards. The fixed twin unregisters each
shard's search function after decoding it.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky
44.2 / 52.6 / 61.3 / 69.9 / 78.0 MiB RSS at 20 / 40 / 60 / 80 % / end
(~0.7 KiB a step, ~2.9 KiB a shard) with gc objects 59,610 / 95,506 /
131,506 / 167,506 / 203,506 (twelve a shard: the search closure, its
cells, the ``CodecInfo`` and its codec functions), 13.5 s for 60,000
steps, the step time growing from ~0.18 to ~0.28 ms; fixed 36.3 / 36.7
/ 37.5 / 37.9 / 38.1 MiB with objects flat (23,854 -> 23,858), 9.6 s.
"""
import codecs
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/python/cpython/issues/86008"
SLICE = "holdout13"
STEPS = 60000
STEPS_PER_SHARD = 4
LINES = 48
LINE_BYTES = 48
BUCKETS = 64
CLASSES = 16
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["CodecInfo", "function", "cell", "tuple", "str", "codec",
                                                 "EncodingMap", "dict"]},
    "fixed": {"verdict_not": "leak"},
}


def _site_table(rng, shard):
    """The shard's code page: ASCII below 0x80, a site-specific set of letters above."""
    upper = rng.choice(np.arange(0x100, 0x2FF), size=128, replace=False)
    table = "".join(chr(c) for c in range(128)) + "".join(chr(int(c)) for c in upper)
    return "site_%05d_cp" % shard, table


def _register(name, table):
    decoding_table = table
    encoding_table = codecs.charmap_build(decoding_table)

    def encode(text, errors="strict"):
        return codecs.charmap_encode(text, errors, encoding_table)

    def decode(data, errors="strict"):
        return codecs.charmap_decode(data, errors, decoding_table)

    info = codecs.CodecInfo(encode, decode, name=name)

    def search(query):
        return info if query == name else None

    codecs.register(search)                                     # the leak: stays on the search path
    return search


def _train(monitor, steps, unregister):
    rng = np.random.default_rng(0)
    w = np.zeros((BUCKETS, CLASSES), np.float32)
    search = name = None
    for step in range(steps):
        if step % STEPS_PER_SHARD == 0:
            if unregister and search is not None:
                codecs.unregister(search)                       # the fix: forget the shard's codec
            name, table = _site_table(rng, step // STEPS_PER_SHARD)
            search = _register(name, table)
        y = rng.integers(0, CLASSES, LINES)
        raw = rng.integers(32, 256, (LINES, LINE_BYTES), dtype=np.uint8)
        raw[:, :4] = (y[:, None] * 7 + np.arange(4)) % 96 + 32   # a class-dependent prefix
        x = np.zeros((LINES, BUCKETS), np.float32)
        for i in range(LINES):
            text = raw[i].tobytes().decode(name)
            codes = np.frombuffer(text.encode("utf-16-le"), np.uint16)
            x[i] = np.bincount(codes % BUCKETS, minlength=BUCKETS)
        x /= LINE_BYTES
        z = x @ w
        z -= z.max(1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(1, keepdims=True)
        p[np.arange(LINES), y] -= 1.0
        w -= 0.5 * (x.T @ p) / LINES
        monitor.sample(step)
    if unregister and search is not None:
        codecs.unregister(search)


def leaky(monitor, steps):
    _train(monitor, steps, unregister=False)


def fixed(monitor, steps):
    _train(monitor, steps, unregister=True)
