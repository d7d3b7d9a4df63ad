"""A Keras callback draws a confusion-matrix figure and a reliability-curve figure of the validation set at the end of every epoch with a pyplot-style interface and saves them as PNGs for the run's report, but never closes them; as with matplotlib's pyplot, every figure created through the interface is registered with the figure manager (``Gcf.figs``) until it is explicitly closed, so each epoch's two figures stay alive with their axes, artists, plotted arrays and the Agg canvas's rendered RGBA buffer (``model.fit`` + ``LeakCallback``; grows in bursts, ~0.6 MiB at every epoch end, 50 batches apart).

Source: quantopian/alphalens pull request #241 "BUG: Figures are not
closed causing memory leak": "From matplotlib documentation: The memory
required for a Figure is not completely released until the figure is
explicitly closed with close(). Deleting all references to the figure,
and/or using the window manager to kill the window in which the figure
appears on the screen, is not enough, because pyplot maintains internal
references until close() is called." Fix used here (the PR's): the
callback calls ``plt.close(fig)`` after saving each figure.
Summary: a 32-64-10 softmax classifier trained with ``model.fit`` (Adam, 50
batches of 64 an epoch) on in-memory synthetic clusters; at each epoch end
the callback scores 512 validation examples, plots the 10x10 confusion
matrix (an image, ticks and 100 cell labels) and the reliability curve (10
bins, two lines, a legend) on 4x3-inch figures at 80 dpi, renders them into
the canvas's 320x240 RGBA buffer and saves a compressed copy. The pyplot
layer is a small in-process stand-in (matplotlib is not installed here):
``figure``/``subplots`` register a ``FigureManager`` in ``Gcf.figs`` and
``close`` removes it, as in ``matplotlib._pylab_helpers``.

Here: 6,000 batches (120 epochs). The fixed callback closes both figures.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a stub callback in place of
``LeakCallback``; RSS read before each object count, at the marks only):
leaky 581.0 / 596.2 / 611.5 / 626.6 / 641.7 MiB RSS at 20 / 40 / 60 / 80 %
/ end (562.5 MiB at the first batch; ~0.63 MiB an epoch: two figures with
their axes, ~100 texts, image and line arrays and a 300 KB RGBA buffer
each, in ``Gcf.figs``) with gc objects 328,325 at the first batch, then
331,287 / 334,359 / 337,431 / 340,503 / 343,575 at the same marks (128 an
epoch), 13.9 s for 6,000 batches (~2.3 ms a batch, the epoch-end plots
included); fixed 567.8 / 570.1 / 570.2 / 570.3 / 570.4 MiB (Keras's own
settling over the first 40 %) with objects 328,497 / 328,343 / 328,343 /
328,343 / 328,343, 10.6 s. 14-17 s a variant in its process, imports
included.
"""
import collections
import io
import os
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/quantopian/alphalens/pull/241"
SLICE = "holdout20"
STEPS = 6000            # batches; 50 per epoch, 120 epochs
PER_EPOCH = 50
BATCH = 64
FEATURES = 32
CLASSES = 10
VALID = 512
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Figure", "ndarray", "numpy", "Axes", "Text"],
              "holder_any": ["Gcf", "figs", "FigureManager"]},
    "fixed": {"verdict_not": "leak"},
}


# --------------------------------------------------------------------------- a minimal pyplot

class Artist:
    def __init__(self, axes, **props):
        self.axes = axes
        self.props = props


class Line2D(Artist):
    def __init__(self, axes, x, y, **props):
        super().__init__(axes, **props)
        self._x = np.asarray(x, dtype=float).copy()
        self._y = np.asarray(y, dtype=float).copy()


class Text(Artist):
    def __init__(self, axes, x, y, s, **props):
        super().__init__(axes, **props)
        self._x, self._y, self._text = x, y, s


class AxesImage(Artist):
    def __init__(self, axes, a, **props):
        super().__init__(axes, **props)
        self._A = np.asarray(a, dtype=float).copy()


class Axes:
    def __init__(self, figure, rect):
        self.figure = figure
        self.rect = rect
        self.lines, self.texts, self.images = [], [], []
        self.title = None
        self.xlabel = self.ylabel = None

    def plot(self, x, y, **props):
        line = Line2D(self, x, y, **props)
        self.lines.append(line)
        return [line]

    def imshow(self, a, **props):
        image = AxesImage(self, a, **props)
        self.images.append(image)
        return image

    def text(self, x, y, s, **props):
        t = Text(self, x, y, s, **props)
        self.texts.append(t)
        return t

    def set_title(self, s):
        self.title = Text(self, 0.5, 1.0, s)

    def set_xlabel(self, s):
        self.xlabel = Text(self, 0.5, -0.1, s)

    def set_ylabel(self, s):
        self.ylabel = Text(self, -0.1, 0.5, s)

    def legend(self):
        self.texts.append(Text(self, 0.8, 0.1, "legend", entries=[l.props.get("label") for l in self.lines]))


class RendererAgg:
    def __init__(self, width, height):
        self._buffer = np.zeros((height, width, 4), dtype=np.uint8)   # the RGBA buffer

    def draw(self, figure):
        h, w, _ = self._buffer.shape
        self._buffer[...] = 255
        for ax in figure.axes:
            for image in ax.images:
                a = image._A / max(float(image._A.max()), 1e-9)
                tile = np.kron(a, np.ones((max(h // (2 * a.shape[0]), 1), max(w // (2 * a.shape[1]), 1))))
                th, tw = tile.shape
                self._buffer[:th, :tw, 0] = (255 * (1 - tile)).astype(np.uint8)
            for line in ax.lines:
                cols = np.clip((line._x * (w - 1)).astype(int), 0, w - 1)
                rows = np.clip(((1 - line._y) * (h - 1)).astype(int), 0, h - 1)
                self._buffer[rows, cols, :3] = 0


class FigureCanvasAgg:
    def __init__(self, figure):
        self.figure = figure
        self.renderer = None

    def get_renderer(self):
        w, h = (int(v * self.figure.dpi) for v in self.figure.figsize)
        if self.renderer is None:
            self.renderer = RendererAgg(w, h)                # cached on the canvas, as in matplotlib
        return self.renderer

    def print_png(self, fh):
        renderer = self.get_renderer()
        renderer.draw(self.figure)
        fh.write(zlib.compress(renderer._buffer.tobytes(), 1))


class Figure:
    def __init__(self, figsize, dpi):
        self.figsize = figsize
        self.dpi = dpi
        self.axes = []
        self.canvas = FigureCanvasAgg(self)

    def add_subplot(self):
        ax = Axes(self, (0.1, 0.1, 0.8, 0.8))
        self.axes.append(ax)
        return ax

    def savefig(self, fh):
        self.canvas.print_png(fh)


class FigureManager:
    def __init__(self, canvas, num):
        self.canvas = canvas
        self.num = num


class Gcf:
    """matplotlib._pylab_helpers.Gcf: keeps every pyplot figure until it is closed."""
    figs = collections.OrderedDict()

    @classmethod
    def destroy(cls, num):
        cls.figs.pop(num, None)


class plt:
    _next = 1

    @staticmethod
    def subplots(figsize=(4, 3), dpi=80):
        fig = Figure(figsize, dpi)
        ax = fig.add_subplot()
        Gcf.figs[plt._next] = FigureManager(fig.canvas, plt._next)
        fig.number = plt._next
        plt._next += 1
        return fig, ax

    @staticmethod
    def close(fig):
        Gcf.destroy(fig.number)


# --------------------------------------------------------------------------- the callback

class EpochReportFigures(keras.callbacks.Callback):
    def __init__(self, x_val, y_val, close_figures):
        super().__init__()
        self.x_val = x_val
        self.y_val = y_val
        self.close_figures = close_figures
        self.saved = collections.deque(maxlen=4)             # the last PNGs, for the report page

    def on_epoch_end(self, epoch, logs=None):
        probs = tf.nn.softmax(self.model(self.x_val, training=False)).numpy()
        pred = probs.argmax(1)
        cm = np.zeros((CLASSES, CLASSES))
        np.add.at(cm, (self.y_val, pred), 1)

        fig, ax = plt.subplots()
        ax.imshow(cm, cmap="Blues")
        for i in range(CLASSES):
            for j in range(CLASSES):
                ax.text(j, i, "%d" % cm[i, j], ha="center", va="center")
        ax.set_title("confusion matrix, epoch %d" % epoch)
        ax.set_xlabel("predicted")
        ax.set_ylabel("true")
        buf = io.BytesIO()
        fig.savefig(buf)
        self.saved.append(buf.getvalue())
        if self.close_figures:                               # the fix (alphalens#241)
            plt.close(fig)

        conf = probs.max(1)
        correct = (pred == self.y_val).astype(float)
        bins = np.clip((conf * 10).astype(int), 0, 9)
        acc = np.array([correct[bins == b].mean() if np.any(bins == b) else 0.0 for b in range(10)])
        mid = (np.arange(10) + 0.5) / 10
        fig, ax = plt.subplots()
        ax.plot(mid, acc, label="model")
        ax.plot(mid, mid, label="perfectly calibrated")
        ax.legend()
        ax.set_title("reliability, epoch %d" % epoch)
        buf = io.BytesIO()
        fig.savefig(buf)
        self.saved.append(buf.getvalue())
        if self.close_figures:
            plt.close(fig)


def _fit(logdir, steps, close_figures):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, PER_EPOCH * BATCH)
    x = (centers[y] + 1.1 * rng.standard_normal((len(y), FEATURES))).astype(np.float32)
    y_val = rng.integers(0, CLASSES, VALID)
    x_val = (centers[y_val] + 1.1 * rng.standard_normal((VALID, FEATURES))).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y.astype(np.int32), batch_size=BATCH, epochs=max(1, steps // PER_EPOCH), verbose=0,
              shuffle=True, callbacks=[EpochReportFigures(x_val, y_val, close_figures),
                                       tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, close_figures=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, close_figures=True)
