"""A Keras digit classifier trains with ``model.fit`` on a ``PyDataset`` that labels each scanned digit by running it through an OCR wrapper with a fresh ``DigitBuilder()``, written like pyocr's builders before issue #48 was fixed: ``tesseract_configs``, ``file_extensions`` and ``cuneiform_args`` are class-level lists that every builder's ``__init__`` extends in place, so each builder ever made adds its options to lists shared by the whole class (``model.fit`` on a ``PyDataset`` + ``LeakCallback``; small: ~0.8 KiB a batch, all of it in three class-level ``list``\s).

Source: openpaperwork/pyocr issue #48 "Builders : bad use of class
attributes" (closed): "The builders have lists as class attributes --
``file_extensions``, ``tesseract_configs``, ``cuneiform_args`` -- and at
init these lists are appended to ... ``print(TextBuilder.tesseract_configs)``
prints ``['-psm', '3', '-psm', '3', '-psm', '3']``". Proposed fix "simple :
Make these lists instance attributes and not class attributes";
maintainer: "Just switching to instance attributes (which it should have
been from the s[tart])". Fix used here (that one): each builder builds its
own lists in ``__init__``, so they go with the builder.
Summary: the builders and the OCR tool are stand-ins with pyocr's shape
(``TextBuilder.__init__`` extending ``tesseract_configs`` with
``["--psm", "7"]``, ``file_extensions`` with ``["txt"]`` and
``cuneiform_args`` with ``["-f", "text"]``, ``DigitBuilder`` adding
``"digits"``; ``image_to_string(image, builder=...)`` builds the argv from
the builder's last options and "reads" the digit by nearest template). The
``PyDataset`` yields 100 batches an epoch of 16 noisy 16x16 digit scans;
the model is a Keras 256-64-10 network (Adam).

Here: 4,000 batches (40 epochs). The fixed builders own their lists.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/openpaperwork/pyocr/issues/48"
SLICE = "holdout25"
STEPS = 4000            # batches; 100 per epoch, 40 epochs
PER_EPOCH = 100
BATCH = 16
SIDE = 16
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["list", "str"],
              "holder_any": ["tesseract_configs", "file_extensions", "cuneiform_args", "TextBuilder", "DigitBuilder"]},
    "fixed": {"verdict_not": "leak"},
}

_TEMPLATES = np.random.default_rng(123).random((10, SIDE, SIDE)).astype(np.float32)


class TextBuilder:
    """pyocr ``builders.TextBuilder``-like, before issue #48."""
    file_extensions = []
    tesseract_configs = []
    cuneiform_args = []

    def __init__(self, tesseract_layout=7):
        self.file_extensions += ["txt"]                       # extends the class-level lists in place
        self.tesseract_configs += ["--psm", str(tesseract_layout)]
        self.cuneiform_args += ["-f", "text"]


class DigitBuilder(TextBuilder):
    def __init__(self, tesseract_layout=7):
        super().__init__(tesseract_layout)
        self.tesseract_configs += ["digits"]


class FixedTextBuilder:
    """The fix: instance attributes."""
    def __init__(self, tesseract_layout=7):
        self.file_extensions = ["txt"]
        self.tesseract_configs = ["--psm", str(tesseract_layout)]
        self.cuneiform_args = ["-f", "text"]


class FixedDigitBuilder(FixedTextBuilder):
    def __init__(self, tesseract_layout=7):
        super().__init__(tesseract_layout)
        self.tesseract_configs.append("digits")


def image_to_string(image, builder):
    """pyocr ``tesseract.image_to_string``-like: argv from the builder, a nearest-template "read"."""
    argv = ["tesseract", "stdin", "stdout"] + builder.tesseract_configs[-3:]
    ext = builder.file_extensions[0]
    d = ((_TEMPLATES - image[None]) ** 2).sum((1, 2))
    text = str(int(d.argmin()))
    return text if argv[-1] == "digits" and ext == "txt" else text


class DigitScans(keras.utils.PyDataset):
    def __init__(self, builder_cls, seed=0):
        super().__init__()
        self.builder_cls = builder_cls
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return PER_EPOCH

    def __getitem__(self, index):
        digits = self.rng.integers(0, 10, BATCH)
        x = _TEMPLATES[digits] + 0.3 * self.rng.standard_normal((BATCH, SIDE, SIDE)).astype(np.float32)
        y = np.array([int(image_to_string(img, builder=self.builder_cls())) for img in x], np.int32)
        return x.reshape(BATCH, SIDE * SIDE), y


def _fit(logdir, steps, builder_cls):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((SIDE * SIDE,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(DigitScans(builder_cls), epochs=max(1, steps // PER_EPOCH), verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, DigitBuilder)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, FixedDigitBuilder)
