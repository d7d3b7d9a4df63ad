"""A Keras model trains from a ``PyDataset`` that reads every batch out of chunked HDF5-style shards, opening a dataset identifier and an attribute identifier per chunk; like h5py before pull request #2783, every identifier registers itself in a module-level object registry, a plain ``dict`` of weak references keyed by the object's id, and the cleanup path that should delete the entry when the identifier is freed leaves it behind, so the registry gains a dead weak reference and a dict slot for every identifier ever opened (``model.fit`` on a ``PyDataset`` + ``LeakCallback``; grows every batch, small: ~1 KiB a batch, 8 identifiers).

Source: h5py/h5py issue #2771 and pull request #2783 "Use a WeakValueDictionary
for the object registry" (merged, closes #2771): "This is an alternative to
#2782, fixing the same memory leak. This one is a bigger change, using the
WeakValueDictionary class, which automatically discards its own entries when
they're garbage collected, rather than managing a regular dict of weakref
objects ourselves." (``cdef dict registry = {}`` became ``cdef object registry
= weakref.WeakValueDictionary()``; the first option, #2782, only changed how
the entry is deleted, and its author notes he did not understand why the
generic deletion path left entries behind.) Fix used here (the merged PR's):
the registry is a ``weakref.WeakValueDictionary``.
Summary: the library is a stand-in with h5py's ``_objects`` shape: an
``ObjectID`` base registers ``weakref.ref(self)`` under ``id(self)`` in
``registry`` when created and its ``__del__`` runs the cleanup, which in the
leaky build fails to remove the entry (as in the report). Shards are
in-memory chunk stores; each batch opens a ``DatasetID`` and an ``AttrID`` for
four chunks, reads the features and the per-chunk scale attribute and lets
the identifiers go. The model is a Keras 64-128-64-4 classifier trained with
``model.fit`` (Adam, 100 batches of 64 an epoch).

Here: 6,000 batches (60 epochs). The fixed registry is a
``WeakValueDictionary``.
"""
import os
import weakref

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/h5py/h5py/pull/2783"
SLICE = "holdout22"
STEPS = 6000            # batches; 100 per epoch, 60 epochs
PER_EPOCH = 100
BATCH = 64
CHUNKS_PER_BATCH = 4
FEATURES = 64
CLASSES = 4
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["weakref", "ReferenceType", "dict"],
              "holder_any": ["registry", "_objects"]},
    "fixed": {"verdict_not": "leak"},
}


class _objects:
    """h5py._objects stand-in."""
    registry = {}
    weak_values = False

    @classmethod
    def reset(cls, weak_values):
        cls.weak_values = weak_values
        cls.registry = weakref.WeakValueDictionary() if weak_values else {}


class ObjectID:
    def __init__(self, hid):
        self.id = hid
        if _objects.weak_values:
            _objects.registry[id(self)] = self
        else:
            _objects.registry[id(self)] = weakref.ref(self)

    def __del__(self):
        # the reported build's cleanup: the entry is looked up by the HDF5 id,
        # not by the key it was stored under, so nothing is removed
        if not _objects.weak_values:
            _objects.registry.pop(("hid", self.id), None)


class DatasetID(ObjectID):
    def __init__(self, hid, store):
        super().__init__(hid)
        self.store = store

    def read(self, chunk):
        return self.store[chunk]


class AttrID(ObjectID):
    def __init__(self, hid, attrs, name):
        super().__init__(hid)
        self.value = attrs[name]

    def read(self):
        return self.value


class Shard:
    def __init__(self, rng, chunks, rows, centers):
        self.labels = rng.integers(0, CLASSES, (chunks, rows)).astype(np.int32)
        self.chunks = (centers[self.labels] + rng.standard_normal((chunks, rows, FEATURES))).astype(np.float32)
        self.attrs = {"scale_%d" % c: np.float32(1.0 + 0.01 * c) for c in range(chunks)}
        self._hid = 0

    def next_hid(self):
        self._hid += 1
        return self._hid


class ShardSequence(keras.utils.PyDataset):
    def __init__(self, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
        self.rows = BATCH // CHUNKS_PER_BATCH
        self.shard = Shard(rng, PER_EPOCH * CHUNKS_PER_BATCH, self.rows, centers)

    def __len__(self):
        return PER_EPOCH

    def __getitem__(self, index):
        xs, ys = [], []
        for k in range(CHUNKS_PER_BATCH):
            chunk = index * CHUNKS_PER_BATCH + k
            dset = DatasetID(self.shard.next_hid(), self.shard.chunks)
            attr = AttrID(self.shard.next_hid(), self.shard.attrs, "scale_%d" % chunk)
            xs.append(dset.read(chunk) * attr.read())
            ys.append(self.shard.labels[chunk])
            del dset, attr
        return np.concatenate(xs), np.concatenate(ys)


def _fit(logdir, steps, weak_values):
    _objects.reset(weak_values)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(64, activation="relu"), keras.layers.Dense(CLASSES)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    try:
        model.fit(ShardSequence(), epochs=max(1, steps // PER_EPOCH), verbose=0,
                  callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])
    finally:
        _objects.reset(weak_values)


def leaky_fit(logdir, steps):
    _fit(logdir, steps, weak_values=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, weak_values=True)
