"""An audio-language model is fine-tuned with an eager ``GradientTape`` loop on a long, streamed list of utterances; the dataset class is written like Kimi-Audio's ``finetune_codes/datasets.py`` before issue #117, with ``@lru_cache(maxsize=None)`` on ``__getitem__``, so every utterance's features, token ids and mask (a dict of numpy arrays) stay cached for the rest of the run, although a pass over the data never asks for the same index twice (TensorFlow eager Keras; grows every step, large: ~85 KiB a step, 16 cached examples of ~5.3 KiB).

Source: MoonshotAI/Kimi-Audio issue #117 "``@lru_cache(maxsize=None)`` may
cause memory leakage when training data grows larger": "``@lru_cache(maxsize=None)
def __getitem__(self, i) -> Dict[str, torch.Tensor]:`` in
finetune_codes/datasets.py may cause memory leakage when training data grows
larger." Fix used here (the issue's suggestion): no memo on ``__getitem__``;
examples are built when asked for.
Summary: the dataset is a stand-in with the shape of the fine-tuning
dataset (``__len__``, ``__getitem__(i)`` returning ``input_ids``,
``whisper_input_feature`` and ``attention_mask`` for utterance ``i``, decoded
from a seeded generator). Because ``lru_cache`` sits on the class's function,
its key includes ``self`` and the cache is held by the class. The model is a
Keras 40x24 feature encoder (flatten, 256, 128) with a 32-way head, trained
eagerly with Adam on batches of 16 consecutive utterances.

Here: 1,800 steps (28,800 utterances of a 1,000,000-utterance list). The
fixed dataset has no memo.
"""
import functools
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/MoonshotAI/Kimi-Audio/issues/117"
SLICE = "holdout22"
STEPS = 1800
BATCH = 16
FRAMES = 40
MELS = 24
TOKENS = 96
CLASSES = 32
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy", "dict"],
              "holder_any": ["__getitem__", "lru_cache", "cache", "Dataset"]},
    "fixed": {"verdict_not": "leak"},
}


class _Base:
    def __init__(self, n):
        self.n = n
        self.centers = np.random.default_rng(7).standard_normal((CLASSES, FRAMES * MELS)).astype(np.float32)

    def __len__(self):
        return self.n

    def _build(self, i):
        g = np.random.default_rng(i)
        label = int(g.integers(0, CLASSES))
        feat = (self.centers[label] + g.standard_normal(FRAMES * MELS)).astype(np.float32).reshape(FRAMES, MELS)
        ids = g.integers(0, 4096, TOKENS).astype(np.int64)
        return {"whisper_input_feature": feat, "input_ids": ids,
                "attention_mask": np.ones(TOKENS, np.int8), "label": label}


class LazySupervisedDataset(_Base):
    @functools.lru_cache(maxsize=None)
    def __getitem__(self, i):
        return self._build(i)


class LazySupervisedDatasetNoMemo(_Base):
    def __getitem__(self, i):
        return self._build(i)


def _run(monitor, steps, memo):
    keras.utils.set_random_seed(0)
    ds = (LazySupervisedDataset if memo else LazySupervisedDatasetNoMemo)(1_000_000)
    model = keras.Sequential([keras.Input((FRAMES, MELS)), keras.layers.Flatten(),
                              keras.layers.Dense(256, activation="relu"), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    opt = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for step in range(steps):
        items = [ds[step * BATCH + k] for k in range(BATCH)]
        x = np.stack([it["whisper_input_feature"] for it in items])
        y = np.array([it["label"] for it in items], np.int32)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, memo=True)


def fixed(monitor, steps):
    _run(monitor, steps, memo=False)
