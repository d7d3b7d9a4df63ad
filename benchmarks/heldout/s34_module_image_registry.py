"""Each evaluated image registered in a module-level dict that is never emptied (no TensorFlow).

Source: confident-ai/deepeval#2551 "fix: use WeakValueDictionary for
_MLLM_IMAGE_REGISTRY to prevent memory leak" (fixes #2546): every
``MLLMImage.__post_init__`` adds the image to the module-level
``_MLLM_IMAGE_REGISTRY`` dict and nothing removes it; each entry holds the
full base64-encoded image, so batch evaluations over many images keep them all
for the life of the process. Fix: make the registry a
``weakref.WeakValueDictionary``.
Summary: an image generator is evaluated after every training step on a
sample it renders; each sample is wrapped in an image test-case object that
registers itself under its id in a module-level registry (so that other test
cases can refer to it by id). The cases are dropped after scoring, but the
registry keeps every one, with its encoded image.

Here: a numpy "generator" (a 48 -> 64 x 64 x 3 linear map and a sigmoid)
renders one 64 x 64 RGB uint8 image per step (12 KiB, 16 KiB as base64 text).

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +33.1 MiB RSS from 20 % of the run to the end (~21 KiB per step),
fixed +0.2 MiB; ~2.2 ms a step (~8 ms under load).
"""
import base64
import dataclasses
import weakref

import numpy as np

SOURCE = "https://github.com/confident-ai/deepeval/pull/2551"
SLICE = "holdout3"
STEPS = 2000
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["EvalImage", "str", "dict"],
              "holder_any": ["_IMAGE_REGISTRY", "registry"]},
    "fixed": {"verdict_not": "leak"},
}

_IMAGE_REGISTRY = {}          # image id -> EvalImage, so that other cases can refer to an image by id


@dataclasses.dataclass(eq=False)
class EvalImage:
    image_id: str
    data_b64: str

    def __post_init__(self):
        _IMAGE_REGISTRY[self.image_id] = self

    def pixels(self):
        return np.frombuffer(base64.b64decode(self.data_b64), dtype=np.uint8).reshape(64, 64, 3)


def _score(case, target):
    img = case.pixels().astype(np.float32) / 255.0
    return float(np.abs(img - target).mean())


def _loop(monitor, steps):
    rng = np.random.default_rng(0)
    g = rng.standard_normal((48, 64 * 64 * 3)).astype(np.float32) * 0.05
    target = rng.random((64, 64, 3), dtype=np.float32)
    for step in range(steps):
        z = rng.standard_normal((1, 48)).astype(np.float32)
        out = 1.0 / (1.0 + np.exp(-(z @ g)))
        grad = (out - target.reshape(1, -1)) * out * (1.0 - out)
        g -= 0.5 * z.T @ grad                            # the generator's training step
        pixels = (out.reshape(64, 64, 3) * 255).astype(np.uint8)
        case = EvalImage("sample-%d" % step, base64.b64encode(pixels.tobytes()).decode("ascii"))
        _score(case, target)
        monitor.sample(step)


def leaky(monitor, steps):
    _loop(monitor, steps)                                # the plain module-level dict


def fixed(monitor, steps):
    global _IMAGE_REGISTRY
    _IMAGE_REGISTRY = weakref.WeakValueDictionary()      # the PR's fix: the registry holds images weakly
    _loop(monitor, steps)
