"""A README-quality classifier converts each crawled Markdown document to text with one module-level ``markdown.Markdown`` instance (built once "for speed", as the library's docs suggest) and never calls ``reset()`` between documents; the instance's raw-HTML stash and its footnotes keep every document's blocks, so memory and the conversion time grow with every document (eager ``tf.GradientTape`` loop; small leak, step time growing).

Source: Python-Markdown/markdown#305 "Bad performance when reusing
markdown.Markdown instance" ("this causes performance to degrade
(unbounded) as the number of documents processed increases due to ... an
ever growing stash of HTML blocks"), the same leak in
ucrcsedept/galah#422 ("Resolve leak in Flask-Markdown": "a 'stash' in
the markdown object to grow unbounded") and mozilla/standup PR #293 ("we
need to call .reset() between convert calls ... This also has a HUGE
effect on memory"); waylan in #111: "you should call the ``reset()``
method on the class between each document (as documented)". Fix used
here (the threads'): ``_MD.reset()`` before each ``convert``.
Summary: each document (a heading, a paragraph with inline HTML badges, a
footnote, an HTML details block) is converted, stripped of tags and
hashed into 128 features for a logistic "good README" classifier trained
with ``tf.GradientTape``.

Here: 1,100 documents, one a step; the fixed twin resets the converter
before every document.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, Markdown 3.11 (its footnotes extension), TF 2.21; a
do-nothing ``monitor.sample``): leaky
541.4 / 544.4 / 545.1 / 545.9 / 546.9 MiB RSS at 20 / 40 / 60 / 80 % /
end (~4 KiB a document) with gc objects 315,733 / 316,201 / 316,851 /
317,507 / 318,167 (three a document: stashed blocks and the footnote),
40.6 s for 1,100 steps, the step time growing from ~2 ms to ~65 ms;
fixed 540.6 / 542.9 / 543.1 / 543.1 / 543.1 MiB with objects 315,296 /
315,053 / 315,647 / 315,548 / 315,449 (no trend), 5.2 s.
"""
import os
import re
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import markdown
import numpy as np
import tensorflow as tf

SOURCE = "https://github.com/Python-Markdown/markdown/issues/305"
SLICE = "holdout14"
STEPS = 1100
FEATURES = 128
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["str", "list", "Element", "dict", "markdown"],
              "holder_any": ["_MD", "htmlStash", "rawHtmlBlocks", "footnotes"]},
    "fixed": {"verdict_not": "leak"},
}

_MD = markdown.Markdown(extensions=["footnotes"])
_TAG = re.compile(r"<[^>]+>")
_WORDS = ("install", "usage", "license", "example", "api", "todo", "wip", "test", "docs", "build")


def _document(rng, good, serial):
    words = " ".join(_WORDS[i] for i in rng.integers(0, 10 if good else 4, 24))
    return ("# project-%d\n\n<img src=\"badge-%d.svg\"/> <b>%s</b> %s[^n%d]\n\n"
            "<details><summary>more %d</summary>%s</details>\n\n[^n%d]: see %s\n"
            % (serial, serial, words[:20], words, serial, serial, words, serial, words[:40]))


def _train(monitor, steps, reset_between_documents):
    rng = np.random.default_rng(0)
    w = tf.Variable(tf.zeros((FEATURES, 1)))
    b = tf.Variable(tf.zeros((1,)))
    opt = tf.keras.optimizers.SGD(0.1)
    for step in range(steps):
        good = int(rng.random() < 0.5)
        if reset_between_documents:
            _MD.reset()                                   # the fix: forget the previous document
        html = _MD.convert(_document(rng, good, step))    # the leak: stash and footnotes keep growing
        feats = np.zeros((1, FEATURES), np.float32)
        for word in _TAG.sub(" ", html).split():
            feats[0, zlib.crc32(word.encode()) % FEATURES] += 0.05
        x = tf.constant(feats)
        with tf.GradientTape() as tape:
            logit = tf.matmul(x, w) + b
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(tf.constant([[float(good)]]), logit))
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        monitor.sample(step)


def leaky(monitor, steps):
    _train(monitor, steps, reset_between_documents=False)


def fixed(monitor, steps):
    _train(monitor, steps, reset_between_documents=True)
