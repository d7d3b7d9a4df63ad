"""A data-curation loop packs every hard example it mines (the augmented input, its label and a small JSON record) into one ``zipfile.ZipFile`` opened in write mode at the start of the run and closed at the end; ``ZipFile`` keeps a ``ZipInfo`` for every member it has written (``filelist`` and ``NameToInfo``) until it is closed, so the archive's in-memory index grows by three entries a step for the whole run (numpy, no TensorFlow; a small, slow leak).

Source: python/cpython issue #153460 "zipfiles.ZipFile's internal
ZipInfo entry cache has no internal bounds": "ZIP files with substantially
many entries will exhaust memory ... As far as I know, there is no way to
prevent this using the ``zipfile.ZipFile`` API" (a writer of 5,000,000
empty entries); the workaround used by dotnet/android PR #405 for the
same growth in libzip ("Every 50 files the archive is closed and then
reopend so more files can be added") and by DotNetZip issue #174
("Finalize the file periodically, then re-open and add more entries").
Fix used here (the workaround): the writer rotates to a new shard
archive every 500 members, so each closed archive's index is freed.
Summary: a logistic-regression hard-example miner over 32-feature
samples; every step's worst example of a 512-sample batch is stored as
``x``, ``y`` and ``meta`` members.

Here: 3 members a step (~0.4 KiB of data), a 32-1 numpy logistic model,
40,000 steps; the archives go to a temporary directory and are deleted
at the end. The fixed twin closes the shard every 500 members.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4; a do-nothing ``monitor.sample``): leaky
48.1 / 60.0 / 71.1 / 84.0 / 95.0 MiB RSS at 20 / 40 / 60 / 80 % / end
(~1.5 KiB a step: three ``ZipInfo`` records with their names) with gc
objects 47,835 / 71,707 / 95,702 / 119,692 / 143,686 (3 a step), 12.7 s
for 40,000 steps; fixed 36.5 / 36.6 / 36.6 / 36.6 / 36.6 MiB with objects
24,666 / 24,571 / 24,476 / 24,381 / 24,286 (at most 500 members in memory,
a saw-tooth too small to see at these marks), 13.3 s.
"""
import io
import json
import os
import shutil
import tempfile
import zipfile

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/python/cpython/issues/153460"
SLICE = "holdout15"
STEPS = 40000
BATCH = 512
FEATURES = 32
MEMBERS_PER_SHARD = 500
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ZipInfo", "str", "list", "dict", "zipfile"],
              "holder_any": ["filelist", "NameToInfo", "ZipFile", "writer"]},
    "fixed": {"verdict_not": "leak"},
}


class HardExampleWriter:
    def __init__(self, root, rotate):
        self.root, self.rotate = root, rotate
        self.shard, self.members = 0, 0
        self.archive = self._open()

    def _open(self):
        return zipfile.ZipFile(os.path.join(self.root, "hard-%05d.zip" % self.shard), "w",
                               compression=zipfile.ZIP_STORED)

    def add(self, step, x, y, meta):
        if self.rotate and self.members >= MEMBERS_PER_SHARD:     # the fix: close and start a new shard
            self.archive.close()
            self.shard += 1
            self.members = 0
            self.archive = self._open()
        buf = io.BytesIO()
        np.save(buf, x)
        self.archive.writestr("step-%07d/x.npy" % step, buf.getvalue())
        self.archive.writestr("step-%07d/y.txt" % step, "%d" % y)
        self.archive.writestr("step-%07d/meta.json" % step, json.dumps(meta))
        self.members += 3                                         # the leak: one archive for the run

    def close(self):
        self.archive.close()


def _train(monitor, steps, rotate):
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(FEATURES)
    w = np.zeros(FEATURES)
    root = tempfile.mkdtemp(prefix="hard-")
    writer = HardExampleWriter(root, rotate)
    try:
        for step in range(steps):
            x = rng.standard_normal((BATCH, FEATURES))
            y = (x @ w_true + 0.3 * rng.standard_normal(BATCH) > 0).astype(np.float64)
            p = 1.0 / (1.0 + np.exp(-(x @ w)))
            w -= 0.05 * x.T @ (p - y) / BATCH
            loss = -(y * np.log(p + 1e-9) + (1 - y) * np.log(1 - p + 1e-9))
            k = int(np.argmax(loss))
            writer.add(step, x[k].astype(np.float16), int(y[k]),
                       {"step": step, "loss": round(float(loss[k]), 4), "p": round(float(p[k]), 4)})
            monitor.sample(step)
    finally:
        writer.close()
        shutil.rmtree(root, ignore_errors=True)


def leaky(monitor, steps):
    _train(monitor, steps, rotate=False)


def fixed(monitor, steps):
    _train(monitor, steps, rotate=True)
