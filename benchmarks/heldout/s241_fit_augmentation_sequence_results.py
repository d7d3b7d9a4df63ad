"""A document-layout classifier is trained with ``model.fit`` from a ``PyDataset`` that renders synthetic page patches and degrades them with an augraphy-style pipeline; its paper phase is an ``AugmentationSequence`` (noise texturing, then brightness texturing, applied with probability 0.3), which, like augraphy's before its fix, appends every augmentation's output image to ``self.results`` on each call and never resets the list, so the sequence object keeps every intermediate image it has produced for the whole run (``model.fit`` + ``LeakCallback``; grows every batch, ~90 KiB a batch, with gc counts flat; ~43 ms a batch).

Source: sparkfish/augraphy issue #416 "Memory leak in
AugmentationSequence": "There seems to be a memory leak in
``augraphy.AugmentationSequence``" (the report's pipeline: ``paper_phase =
[agr.AugmentationSequence([agr.NoiseTexturize(sigma_range=(2, 3),
turbulence_range=(2, 3), p=1),
agr.BrightnessTexturize(texturize_range=(0.999, 0.9999), deviation=0.01,
p=1)], p=0.1)]``, called from the transforms of a training data loader with
8 workers), fixed by pull request #418 "Fixed memory leaks in
AugmentationSequence." (merged). In the version reported, ``__call__`` runs
``self.results.append(current_result)`` for every augmentation of the
sequence, and ``results`` is only created in ``__init__``. Fix used here
(the PR's): ``__call__`` starts with ``self.results = []``, so the list
only holds the current call's outputs.
Summary: 64x64 grayscale page patches of four layout classes (text lines,
two columns, a table grid, a figure block) rendered in numpy, 32 a batch,
50 batches an epoch; each patch goes through an ink phase (a small blur),
the paper phase above (noise texturing built from upsampled random fields,
brightness texturing, probability 0.3) and a post phase (contrast jitter),
all as uint8 images as augraphy passes them. The model is a 32-64-64 conv
net (two strided layers) with global pooling and a 4-way softmax, Adam,
``model.fit`` on the dataset (one worker, no multiprocessing).

Here: 600 batches (12 epochs). The fixed sequence resets ``self.results``
at the start of each call.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a stub callback in place of
``LeakCallback``; RSS read before each object count, at the marks only):
leaky 609.4 / 620.1 / 631.0 / 641.6 / 651.9 MiB RSS at 20 / 40 / 60 / 80 %
/ end (589.9 MiB at the first batch; ~90 KiB a batch: two 64x64 uint8
intermediate images for each of the ~10 patches a batch that go through the
sequence) with gc objects 333,310 at the first batch, then 333,331 /
333,332 / 333,333 / 333,331 / 333,329 at the same marks (flat: numpy arrays
are not tracked by the collector, and the list only grows), 25.6 s for 600
batches (~43 ms a batch); fixed 597.3 / 597.6 / 598.6 / 598.7 / 598.7 MiB
with the same object counts (the list holds the last call's two images; the
allocator settles by 60 %), 25.2 s. 29 s a variant in its process, imports
included.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/sparkfish/augraphy/issues/416"
SLICE = "holdout20"
STEPS = 600             # batches; 50 per epoch, 12 epochs
PER_EPOCH = 50
BATCH = 32
SIZE = 64
CLASSES = 4
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "numpy"],
              "holder_any": ["results", "AugmentationSequence", "paper_phase"]},
    "fixed": {"verdict_not": "leak"},
}


class Augmentation:
    def __init__(self, p=1.0, seed=0):
        self.p = p
        self.rng = np.random.default_rng(seed)

    def should_run(self):
        return self.rng.random() < self.p


class NoiseTexturize(Augmentation):
    def __init__(self, sigma_range=(2, 3), turbulence_range=(2, 3), p=1.0, seed=1):
        super().__init__(p, seed)
        self.sigma_range, self.turbulence_range = sigma_range, turbulence_range

    def __call__(self, image, force=False):
        sigma = self.rng.uniform(*self.sigma_range)
        turbulence = int(self.rng.integers(self.turbulence_range[0], self.turbulence_range[1] + 1))
        noise = np.zeros(image.shape, dtype=np.float32)
        size = SIZE
        while size >= 3:
            field = self.rng.normal(0.0, sigma, (SIZE // size + 1, SIZE // size + 1)).astype(np.float32)
            noise += np.kron(field, np.ones((size, size), dtype=np.float32))[:SIZE, :SIZE]
            size //= turbulence
        return np.clip(image.astype(np.float32) + noise, 0, 255).astype(np.uint8)


class BrightnessTexturize(Augmentation):
    def __init__(self, texturize_range=(0.9, 0.99), deviation=0.03, p=1.0, seed=2):
        super().__init__(p, seed)
        self.texturize_range, self.deviation = texturize_range, deviation

    def __call__(self, image, force=False):
        value = self.rng.uniform(*self.texturize_range)
        field = self.rng.uniform(value - self.deviation, value + self.deviation, image.shape).astype(np.float32)
        return np.clip(image.astype(np.float32) * field, 0, 255).astype(np.uint8)


class AugmentationSequence(Augmentation):
    """augraphy's AugmentationSequence; ``reset_results`` is the fix."""

    def __init__(self, augmentations, p=1.0, reset_results=False, seed=3):
        super().__init__(p, seed)
        self.augmentations = augmentations
        self.results = []
        self.reset_results = reset_results

    def __call__(self, image, layer=None, force=False):
        if force or self.should_run():
            if self.reset_results:                           # the fix (augraphy #418)
                self.results = []
            result = image
            for augmentation in self.augmentations:
                if isinstance(result, tuple):
                    result = result[0]
                current_result = augmentation(result)
                self.results.append(current_result)
                result = current_result
            return result, self.augmentations
        return image


class AugraphyPipeline:
    def __init__(self, ink_phase, paper_phase, post_phase):
        self.ink_phase, self.paper_phase, self.post_phase = ink_phase, paper_phase, post_phase

    def __call__(self, image):
        for phase in (self.ink_phase, self.paper_phase, self.post_phase):
            for augmentation in phase:
                out = augmentation(image)
                image = out[0] if isinstance(out, tuple) else out
        return image


class InkBlur(Augmentation):
    def __call__(self, image, force=False):
        f = image.astype(np.float32)
        return ((f + np.roll(f, 1, 0) + np.roll(f, 1, 1) + np.roll(f, -1, 0)) / 4).astype(np.uint8)


class ContrastJitter(Augmentation):
    def __call__(self, image, force=False):
        c = self.rng.uniform(0.85, 1.15)
        return np.clip((image.astype(np.float32) - 128) * c + 128, 0, 255).astype(np.uint8)


def _render(kind, rng):
    page = np.full((SIZE, SIZE), 235, dtype=np.uint8)
    if kind == 0:                                            # text lines
        for r in range(4, SIZE - 4, 6):
            page[r:r + 2, 4:int(rng.integers(24, SIZE - 4))] = 40
    elif kind == 1:                                          # two columns
        for r in range(4, SIZE - 4, 5):
            page[r:r + 2, 3:21] = 40
            page[r:r + 2, 27:45] = 40
    elif kind == 2:                                          # table grid
        page[4:SIZE - 4:8, 4:SIZE - 4] = 30
        page[4:SIZE - 4, 4:SIZE - 4:10] = 30
    else:                                                    # figure block
        a, b = int(rng.integers(6, 14)), int(rng.integers(30, 42))
        page[a:b, a:b] = 90
    return page


class PageDataset(keras.utils.PyDataset):
    def __init__(self, pipeline, **kwargs):
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.rng = np.random.default_rng(0)

    def __len__(self):
        return PER_EPOCH

    def __getitem__(self, idx):
        labels = self.rng.integers(0, CLASSES, BATCH)
        images = np.stack([self.pipeline(_render(int(k), self.rng)) for k in labels])
        return (images[..., None].astype(np.float32) / 255.0), labels.astype(np.int32)


def _fit(logdir, steps, reset_results):
    keras.utils.set_random_seed(0)
    paper_phase = [AugmentationSequence([NoiseTexturize(sigma_range=(2, 3), turbulence_range=(2, 3), p=1),
                                         BrightnessTexturize(texturize_range=(0.9, 0.99), deviation=0.03, p=1)],
                                        p=0.3, reset_results=reset_results)]
    pipeline = AugraphyPipeline([InkBlur(p=1, seed=4)], paper_phase, [ContrastJitter(p=1, seed=5)])
    model = keras.Sequential([keras.Input((SIZE, SIZE, 1)),
                              keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu"),
                              keras.layers.Conv2D(64, 3, strides=2, padding="same", activation="relu"),
                              keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
                              keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(PageDataset(pipeline), epochs=max(1, steps // PER_EPOCH), verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, reset_results=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, reset_results=True)
