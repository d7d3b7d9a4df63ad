"""A text-recognition model is trained on synthetic word images rendered on the fly; the rendering helper is written like libvips's ``text`` operation before its fix for issue #1655, which loads the requested font file into the font configuration at every call, even when that file was loaded before, and the font configuration keeps every loaded copy, so each rendered sample adds the font file's parsed face to a process-wide list (plain Python + numpy, no TensorFlow; grows every step, ~1.7 KiB a step, one font face (1-bit glyph bitmaps for 64 characters) per rendered word).

Source: libvips/libvips issue #1655 "``text`` will load a fontfile even if
it's already loaded" (closed): "``text`` does not keep track of which
fontfiles it has already loaded, so a loop like ``for i = 1, 10000 do
vips.Image.text(text, {..., fontfile = 'your_fontfile.ttf', ...})`` will slow
down and also eat memory. It seems fontconfig does not try to stop this
either." Maintainer: "It's a simple change so I just patched master." Fix used
here (the patch's): the helper records the font files it has added and adds
each file once.
Summary: the font configuration is a stand-in with fontconfig's
``FcConfigAppFontAddFile`` shape (a module-level config whose ``app_fonts``
list receives a parsed ``FontFace`` (1-bit glyph bitmaps for 64 characters) every
time a file is added); ``text(word, fontfile)`` adds the file, then
rasterises the word from the newest face. Eight font files are cycled. The
model is a numpy softmax classifier over 24x96 word images (26 first
letters), trained with SGD.

Here: 30,000 steps. The fixed helper adds each font file once.
"""
import collections
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/libvips/libvips/issues/1655"
SLICE = "holdout22"
STEPS = 30000
HEIGHT = 24
WIDTH = 96
GLYPHS = 64
CLASSES = 26
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["FontFace", "ndarray", "numpy"],
              "holder_any": ["app_fonts", "FcConfig", "_CONFIG", "config"]},
    "fixed": {"verdict_not": "leak"},
}

_FONT_FILES = {"/usr/share/fonts/synth/face%d.ttf" % i: i for i in range(8)}


class FontFace:
    def __init__(self, path, seed):
        g = np.random.default_rng(seed)
        self.path = path
        self.packed = np.packbits(g.random((GLYPHS, HEIGHT, 8)) > 0.55, axis=-1)   # 1.5 KiB of 1-bit bitmaps


class FcConfig:
    def __init__(self):
        self.app_fonts = []

    def app_font_add_file(self, path):
        self.app_fonts.append(FontFace(path, _FONT_FILES[path]))
        return True

    def match(self, path):
        for face in reversed(self.app_fonts):
            if face.path == path:
                return face
        raise KeyError(path)


_CONFIG = FcConfig()


class TextRenderer:
    def __init__(self, track_loaded):
        self.track_loaded = track_loaded
        self._loaded = set()

    def text(self, word, fontfile):
        if not self.track_loaded or fontfile not in self._loaded:
            _CONFIG.app_font_add_file(fontfile)
            self._loaded.add(fontfile)
        face = _CONFIG.match(fontfile)
        img = np.zeros((HEIGHT, WIDTH), np.float32)
        for i, ch in enumerate(word[:WIDTH // 8]):
            img[:, 8 * i:8 * i + 8] = np.unpackbits(face.packed[ord(ch) % GLYPHS], axis=-1)
        return img


def _run(monitor, steps, track_loaded):
    rng = np.random.default_rng(0)
    renderer = TextRenderer(track_loaded)
    fonts = sorted(_FONT_FILES)
    w = np.zeros((HEIGHT * WIDTH, CLASSES), np.float32)
    losses = collections.deque(maxlen=500)
    try:
        for step in range(steps):
            letters = rng.integers(0, 26, int(rng.integers(3, 12)))
            word = "".join(chr(97 + int(c)) for c in letters)
            x = renderer.text(word, fonts[step % len(fonts)]).ravel()
            x += 0.1 * rng.standard_normal(x.shape).astype(np.float32)
            logits = x @ w
            p = np.exp(logits - logits.max())
            p /= p.sum()
            target = int(letters[0])
            losses.append(-float(np.log(p[target] + 1e-9)))
            p[target] -= 1.0
            w -= 0.01 * np.outer(x, p)
            monitor.sample(step)
    finally:
        _CONFIG.app_fonts.clear()


def leaky(monitor, steps):
    _run(monitor, steps, track_loaded=False)


def fixed(monitor, steps):
    _run(monitor, steps, track_loaded=True)
