"""A ``PyDataset`` streams training samples out of one large tar archive, WebDataset style, and ``tarfile`` keeps the ``TarInfo`` of every member it has read in ``TarFile.members`` (``model.fit``).

Source: python/cpython#102120 "tarfile's cache balloons in memory when
streaming a big tarfile" ("tar files containing millions of small files
... The natural thing to do is to iterate through the tarfile ...
carefully closing them when done ... I was very surprised to discover
that this actually uses gigabytes of memory. That's fixed if you do ...
``tar.members = []  # evil!`` That works because ``tarinfo.TarFile`` has
a cache, ``self.members``. That cache is appended to in
``TarFile.next()``"; python/cpython#102128 later added a ``stream``
option for Python 3.13). Fix on Python 3.11, the report's workaround:
empty ``tar.members`` after each member.
Summary: a ``keras.utils.PyDataset`` reads a sample stream packed as one
tar (``sample%08d.npy`` members, one per example: 64 float32 features and
a label), opened in streaming mode ``"r|"`` over the download stream, and
builds each batch from the next 16 members with ``extractfile``. The
samples are used once and dropped, but every member's ``TarInfo`` (its
name, sizes, offsets, owner strings and header dict) is appended to
``TarFile.members`` by ``next()`` and kept for the whole run.

Here: the archive is produced on the fly by a file-like object (512-byte
headers and padded data, as ``tarfile`` writes them); batches of 16, a
64-128-10 Keras MLP, 100 batches an epoch. The fixed twin sets
``tar.members = []`` after each member.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; ``LeakCallback`` replaced by a stub callback):
leaky +24.7 MiB RSS from 20 % of the run to the end (~10.5 KiB a batch;
+16 gc-tracked objects a batch, one per member: 336,775 / 346,376 /
374,992 objects at 20 % / 40 % / end), fixed +0.3 MiB with objects flat
(327,335-327,338); ~6 ms a batch (18-19 s for 3,000 batches).
"""
import io
import os
import tarfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/python/cpython/issues/102120"
SLICE = "holdout8"
STEPS = 3000           # batches; 100 per epoch, 30 epochs
STEPS_PER_EPOCH = 100
BATCH = 16
FEATURES = 64
CLASSES = 10
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["TarInfo", "dict", "str"],
              "holder_any": ["members", "TarFile", "_tar"]},
    "fixed": {"verdict_not": "leak"},
}


class GeneratedTarStream(io.RawIOBase):
    """The download stream: a tar archive of ``sampleNNNNNNNN.npy`` members, produced as it is read."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.centers = self.rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
        self.pending = b""
        self.made = 0

    def readable(self):
        return True

    def _member(self):
        y = int(self.rng.integers(CLASSES))
        x = (self.centers[y] + self.rng.normal(size=FEATURES)).astype(np.float32)
        payload = x.tobytes() + np.int32(y).tobytes()
        info = tarfile.TarInfo("shard-%04d/sample%08d.npy" % (self.made // 10000, self.made))
        info.size = len(payload)
        info.mtime = 1700000000
        info.uname = info.gname = "data"
        self.made += 1
        return info.tobuf(tarfile.GNU_FORMAT) + payload + b"\0" * (-len(payload) % 512)

    def readinto(self, buf):
        while len(self.pending) < len(buf):
            self.pending += self._member()
        n = len(buf)
        buf[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n


class TarSampleStream(keras.utils.PyDataset):
    def __init__(self, clear_members, **kwargs):
        super().__init__(**kwargs)
        self.clear_members = clear_members
        self._tar = tarfile.open(fileobj=io.BufferedReader(GeneratedTarStream()), mode="r|")
        self._members = iter(self._tar)

    def __len__(self):
        return STEPS_PER_EPOCH

    def __getitem__(self, idx):
        xs, ys = [], []
        for _ in range(BATCH):
            member = next(self._members)                 # TarFile.next() appends it to self._tar.members
            raw = self._tar.extractfile(member).read()
            xs.append(np.frombuffer(raw[:-4], np.float32))
            ys.append(int(np.frombuffer(raw[-4:], np.int32)[0]))
            if self.clear_members:
                self._tar.members = []                   # the fix (cpython#102120's workaround)
        return np.stack(xs), np.array(ys)


def _fit(logdir, steps, clear_members):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(TarSampleStream(clear_members), epochs=max(1, steps // STEPS_PER_EPOCH), verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, clear_members=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, clear_members=True)
