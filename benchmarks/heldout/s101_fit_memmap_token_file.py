"""A token ``PyDataset`` opens the tokenized corpus once as an ``np.memmap`` and reads every batch through it, so each page of the file it has read stays mapped and resident (``model.fit``; native memory).

Source: karpathy/nanoGPT#428 "fix np.memmap memory leak" ("np.memmap
doesn't free memory that it accesses. Thus, the entire dataset gets stored
in RAM as the dataset gets fully accessed. The simplest workaround ... is
to just recreate the memmap for each batch. The extra overhead is
negligible, but the RAM savings are significant"; with the test loop
printing "using 0.2GB of RSS RAM after 1 batches" and growing from there;
see also numpy/numpy#28825, "memory usage reflects the sum of all
previously loaded data, even though only the current chunk of data is
ever relevant"). Fix, the PR's: create the ``np.memmap`` inside the batch
function, so the mapping (and its resident pages) goes away with the
batch.
Summary: a ``keras.utils.PyDataset`` serves next-token batches from a
``uint16`` token file (``train.bin``), opened in ``__init__`` as
``np.memmap(path, dtype=np.uint16, mode="r")``; each batch slices the next
16 windows of 512 tokens and copies them into an array. Every page read
through the long-lived mapping stays in the process's resident set
(file-backed pages), batch after batch; no Python object grows.

Here: a 64 MiB token file written once to the temporary directory and
shared by both variants, read front to back (16 KiB of tokens a batch), a
512-token vocabulary, an embedding + mean-pool + softmax Keras model
predicting the token after each window, 100 batches an epoch. The fixed
twin maps the file anew in every ``__getitem__``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11; ``LeakCallback`` replaced by a stub callback):
leaky +38.4 MiB RSS from 20 % of the run to the end (~16.4 KiB a batch,
the tokens read) with gc objects flat (326,920 / 326,921 / 326,918), fixed
+0.3 MiB; ~8-9 ms a batch (25-27 s for 3,000 batches).
"""
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/karpathy/nanoGPT/pull/428"
SLICE = "holdout8"
STEPS = 3000           # batches; 100 per epoch, 30 epochs
STEPS_PER_EPOCH = 100
BATCH = 16
BLOCK = 512
VOCAB = 512
FILE_TOKENS = 32 * 1024 * 1024          # 64 MiB of uint16
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["native", "rss", "memmap", "mmap"]},
    "fixed": {"verdict_not": "leak"},
}


def token_file():
    """The tokenized corpus (written once, shared by both variants and later runs)."""
    path = os.path.join(tempfile.gettempdir(), "tb-leak-heldout-s101-train-%d.bin" % FILE_TOKENS)
    if not os.path.exists(path) or os.path.getsize(path) != 2 * FILE_TOKENS:
        rng = np.random.default_rng(0)
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "wb") as fh:
            prev = rng.integers(0, VOCAB, 1 << 20)
            for _ in range(FILE_TOKENS >> 20):           # a 1-token Markov chain, so there is something to learn
                chunk = (prev * 7 + rng.integers(0, 5, prev.size)) % VOCAB
                fh.write(chunk.astype(np.uint16).tobytes())
                prev = chunk
        os.replace(tmp, path)
    return path


class TokenWindows(keras.utils.PyDataset):
    def __init__(self, path, map_per_batch, **kwargs):
        super().__init__(**kwargs)
        self.path = path
        self.map_per_batch = map_per_batch
        if not map_per_batch:
            self.data = np.memmap(path, dtype=np.uint16, mode="r")    # mapped once, for the whole run
        self.n_tokens = os.path.getsize(path) // 2
        self.epoch = 0

    def __len__(self):
        return STEPS_PER_EPOCH

    def __getitem__(self, idx):
        data = np.memmap(self.path, dtype=np.uint16, mode="r") if self.map_per_batch else self.data
        start = ((self.epoch * STEPS_PER_EPOCH + idx) * BATCH * (BLOCK + 1)) % (self.n_tokens - BATCH * (BLOCK + 1))
        win = np.array(data[start:start + BATCH * (BLOCK + 1)], dtype=np.int32).reshape(BATCH, BLOCK + 1)
        return win[:, :-1], win[:, -1]

    def on_epoch_end(self):
        self.epoch += 1


def _fit(logdir, steps, map_per_batch):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((BLOCK,), dtype="int32"), keras.layers.Embedding(VOCAB, 32),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(VOCAB)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(TokenWindows(token_file(), map_per_batch), epochs=max(1, steps // STEPS_PER_EPOCH), verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, map_per_batch=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, map_per_batch=True)
