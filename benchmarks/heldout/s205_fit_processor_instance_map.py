"""An intent classifier is trained with ``model.fit`` on a curriculum that, from half-way through, adds a new domain every epoch; the ``PyDataset`` then builds a new MindMeld-style ``Processor`` (with its resource loader: gazetteer and vocabulary tables) for the new domain, and ``Processor.__init__`` registers itself in the class-level ``instance_map`` so that worker calls can find it by id, which keeps every processor ever built and its tables alive (``model.fit`` on a ``PyDataset`` + ``LeakCallback``; late onset, grows once an epoch).

Source: cisco/mindmeld pull request #296 "Fixed mem leak":
"``Processor.instance_map`` is a static map whose values are references to
instance ``Processor`` objects. This static map will remain in memory even
if ``Processor`` objects are de-referenced and since it itself references
these ``Processor`` objects, the ``Processor`` objects will not be
de-referenced as well due to the static map's reference. And since
``Processor`` objects contain ``resource_loader`` objects, no wonder
``resource_loader`` objects are persisting"; "To solve this problem, we
used python's WeakValueDictionary". Fix used here (the PR's):
``instance_map = weakref.WeakValueDictionary()``.
Summary: utterances are 12 token ids; a processor turns them into 256
hashed bag-of-words features plus 16 gazetteer-match features (each
domain's gazetteer is a sorted table of 40,000 entity hashes, its
vocabulary a 12,000 x 2 id table), called through
``subproc_call_instance_function(id(processor), "featurize", ...)`` as in
MindMeld; a 272-64-8 Keras classifier, 40 batches of 32 an epoch.

Here: 4,800 batches (120 epochs); from epoch 60 a new domain (and
processor) every epoch. The fixed map holds processors weakly.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a stub callback in place of
``LeakCallback``): leaky 565.4 / 565.7 / 572.2 / 584.1 / 596.1 MiB RSS at
20 / 40 / 60 / 80 % / end (flat until epoch 60, then ~0.5 MiB an epoch:
one processor with its 40,000-entry gazetteer and vocabulary table) with
gc objects 327,078 / 327,078 / 327,105 / 327,154 / 327,203 (~2 an epoch),
9.0 s for 4,800 batches (~1.9 ms a batch); fixed 565.8 / 566.3 / 566.3 /
566.4 / 566.4 MiB with objects 327,085 -> 327,088, 9.6 s.
"""
import os
import weakref

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/cisco/mindmeld/pull/296"
SLICE = "holdout17"
STEPS = 4800            # batches; 40 per epoch, 120 epochs
PER_EPOCH = 40
CURRICULUM_START = 0.5
BATCH = 32
TOKENS = 12
HASHED = 256
GAZ_FEATURES = 16
GAZETTEER = 40000
VOCAB = 12000
INTENTS = 8
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Processor", "ResourceLoader", "ndarray", "numpy", "dict"],
              "holder_any": ["instance_map", "Processor"]},
    "fixed": {"verdict_not": "leak"},
}


def subproc_call_instance_function(instance_id, func_name, *args, **kwargs):
    """How MindMeld reaches a processor from a worker: by its id in the class map."""
    instance = Processor.instance_map[instance_id]
    return getattr(instance, func_name)(*args, **kwargs)


class ResourceLoader:
    def __init__(self, domain):
        rng = np.random.default_rng(1000 + domain)
        self.domain = domain
        self.gazetteer = np.sort(rng.integers(0, 2 ** 40, GAZETTEER))
        self.vocab = np.stack([np.arange(VOCAB), rng.integers(0, HASHED, VOCAB)], 1)


class Processor:
    instance_map = {}                                           # replaced by the fixed variant

    def __init__(self, domain):
        self.domain = domain
        self.resource_loader = ResourceLoader(domain)
        Processor.instance_map[id(self)] = self                 # the leak (strong, class-level)

    def featurize(self, utterances):
        rl = self.resource_loader
        x = np.zeros((len(utterances), HASHED + GAZ_FEATURES), np.float32)
        rows = np.repeat(np.arange(len(utterances)), TOKENS)
        np.add.at(x, (rows, rl.vocab[utterances.ravel() % VOCAB, 1]), 1.0)
        spans = utterances[:, :-1].astype(np.int64) * 65537 + utterances[:, 1:]
        pos = np.searchsorted(rl.gazetteer, spans)
        hit = rl.gazetteer[np.minimum(pos, GAZETTEER - 1)] == spans
        x[:, HASHED:HASHED + TOKENS - 1] = hit
        x[:, -1] = self.domain / 100.0
        return x


class Curriculum(keras.utils.PyDataset):
    def __init__(self, epochs, **kwargs):
        super().__init__(**kwargs)
        self.rng = np.random.default_rng(0)
        self.epoch = 0
        self.new_domains_from = int(epochs * CURRICULUM_START)
        self.domain = 0
        self.processor = Processor(self.domain)
        self.centers = self.rng.integers(0, VOCAB, (INTENTS, TOKENS))

    def __len__(self):
        return PER_EPOCH

    def __getitem__(self, idx):
        y = self.rng.integers(INTENTS, size=BATCH)
        noise = self.rng.integers(0, VOCAB, (BATCH, TOKENS))
        keep = self.rng.random((BATCH, TOKENS)) < 0.6
        utt = np.where(keep, self.centers[y], noise)
        x = subproc_call_instance_function(id(self.processor), "featurize", utt)
        return x, y

    def on_epoch_end(self):
        self.epoch += 1
        if self.epoch >= self.new_domains_from:                 # a new domain, a new processor
            self.domain += 1
            self.processor = Processor(self.domain)


def _fit(logdir, steps, weak_map):
    keras.utils.set_random_seed(0)
    Processor.instance_map = weakref.WeakValueDictionary() if weak_map else {}   # the fix
    epochs = max(1, steps // PER_EPOCH)
    data = Curriculum(epochs)
    model = keras.Sequential([keras.Input((HASHED + GAZ_FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(INTENTS)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(data, epochs=epochs, verbose=0, callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, weak_map=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, weak_map=True)
