"""A regression trainer serves a live status page and re-renders its status row after every step with an HTML tag library written like air before its fix: each tag's constructor calls ``locals_cleanup``, which takes the tag class's list from the module-level ``HTML_ATTRIBUTES`` map and does ``attrs += ["class_", "for_", "as_", "id", "style"]``, extending the shared list in place instead of building a new one, so every tag built adds five entries to its class's list for good and every later tag of that class loops over all of them (plain Python + numpy, no TensorFlow; grows every step, small: ~0.3 KiB a step, pointers in a few lists, with no new objects; the step time grows with the lists, from ~2.8 ms to ~17 ms).

Source: feldroy/air pull request #343 "Fix memory leak" (merged; commit
51f5c1c "Fix memory leak"): "We were adding to the config structure rather
than creating a new list of values to check. A \"memory leak\". 😬 Sometimes
fancy Python gets you into trouble." Fix used here (the PR's diff in
``air/tags/utils.py``): ``attrs = HTML_ATTRIBUTES.get(obj.__class__.__name__,
[]) + ["class_", "for_", "as_", "id", "style"]``.
Summary: the tag library is a small stand-in with air's shape at that
commit (``Tag`` with ``render``/``attrs``/``children``, tag classes whose
``__init__`` takes the class's keyword attributes and calls
``locals_cleanup(locals(), self)``, and the ``HTML_ATTRIBUTES`` entries of
the tags used: ``Td``, ``Time``, ``Data``, ``Meter``, ``Progress``, ``A``,
``Img``; ``Tr`` and ``Span`` are not in the map, so ``.get`` hands them a
fresh list). The model is a 128-384-1 ReLU regression network trained by
mini-batch SGD (256 rows) with numpy; after every step the trainer renders
``Tr(Td(Time, Data), Td(Meter, Progress, A, Img))`` and keeps the last 50
rendered rows for the page (a ``deque``), in both variants.

Here: 6,000 steps. The fixed ``locals_cleanup`` concatenates into a new
list.

Checked without tb-leak (psutil RSS, gc objects, tracemalloc; fresh
process, Python 3.11, numpy 2.4; a do-nothing ``monitor.sample``; RSS read
before each object count, at the marks only): leaky 49.9 / 51.6 / 51.2 /
52.0 / 51.8 MiB RSS at 20 / 40 / 60 / 80 % / end (48.3 MiB at the first
step; the lists' pointer arrays are reallocated as they grow, so RSS steps
up unevenly) with gc objects 23,754 at the first step, then 23,756 / 23,758
/ 23,760 / 23,762 / 23,764 at the same marks (no new objects), 59.5 s for
6,000 steps (~2.8 ms a step at first, ~17 ms at the end); under tracemalloc
17.50 MiB traced at the first step, then 17.91 / 18.29 / 18.69 / 19.07 /
19.48 MiB at 20 / 40 / 60 / 80 % / end (~0.34 KiB a step: 40 list slots of 8
bytes a step plus over-allocation); fixed 49.1 / 49.1 / 49.1 / 49.1 / 49.1
MiB with the same object counts and 17.50 -> 17.53 MiB traced, 15.3 s (~2.5
ms a step). 60 s (leaky) and 16 s (fixed) in their processes.
"""
import collections
import datetime
import html
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

SOURCE = "https://github.com/feldroy/air/pull/343"
SLICE = "holdout21"
STEPS = 6000
FEATURES = 128
HIDDEN = 384
BATCH = 256
LR = 0.02
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["list", "HTML_ATTRIBUTES"],
              "holder_any": ["HTML_ATTRIBUTES"]},
    "fixed": {"verdict_not": "leak"},
}

# air/tags/config.py (the entries for the tags used here)
HTML_ATTRIBUTES = {
    "A": ["href", "target", "download", "rel", "hreflang", "typereferrerpolicy", "media", "form", "name"],
    "Data": ["value"],
    "Img": ["src", "width", "heightsrcset", "alt", "crossorigin", "ismap", "loading", "longdesc",
            "referrerpolicy", "sizesusemap"],
    "Meter": ["value", "min", "max", "low", "high", "optimum"],
    "Progress": ["max", "value"],
    "Td": ["colspan", "rowspan", "headers"],
    "Time": ["datetime"],
}

_IN_PLACE = [True]                                           # set per variant


def clean_html_attr_key(key):
    key = dict(class_="class", for_="for", id_="id", as_="as").get(key, key)
    return key.lstrip("_").replace("_", "-")


def locals_cleanup(local_data, obj):
    """Converts arguments to kwargs per the html_attributes structure."""
    data = {}
    if _IN_PLACE[0]:
        attrs = HTML_ATTRIBUTES.get(obj.__class__.__name__, [])
        attrs += ["class_", "for_", "as_", "id", "style"]   # extends the shared list (air before #343)
    else:
        attrs = HTML_ATTRIBUTES.get(obj.__class__.__name__, []) + ["class_", "for_", "as_", "id", "style"]
    for attr in attrs:
        if attr in local_data and local_data[attr] is not None:
            data[attr] = local_data[attr]
    return data


class Tag:
    def __init__(self, *children, **kwargs):
        self._name = self.__class__.__name__
        self._children, self._attrs = children, kwargs

    @property
    def name(self):
        return self._name.lower()

    @property
    def attrs(self):
        if not self._attrs:
            return ""
        out = []
        for k, v in self._attrs.items():
            if v is True:
                out.append(clean_html_attr_key(k))
            elif v is False:
                continue
            else:
                out.append(f'{clean_html_attr_key(k)}="{v}"')
        return " " + " ".join(out)

    @property
    def children(self):
        parts = []
        for child in self._children:
            parts.append(child.render() if isinstance(child, Tag) else html.escape(str(child)))
        return "".join(parts)

    def render(self):
        return f"<{self.name}{self.attrs}>{self.children}</{self.name}>"


class Tr(Tag):
    def __init__(self, *children, class_=None, id=None, style=None, **kwargs):
        super().__init__(*children, **kwargs | locals_cleanup(locals(), self))


class Span(Tag):
    def __init__(self, *children, class_=None, id=None, style=None, **kwargs):
        super().__init__(*children, **kwargs | locals_cleanup(locals(), self))


class Td(Tag):
    def __init__(self, *children, colspan=None, rowspan=None, headers=None, class_=None, id=None, style=None,
                 **kwargs):
        super().__init__(*children, **kwargs | locals_cleanup(locals(), self))


class Time(Tag):
    def __init__(self, *children, datetime=None, class_=None, id=None, style=None, **kwargs):
        super().__init__(*children, **kwargs | locals_cleanup(locals(), self))


class Data(Tag):
    def __init__(self, *children, value=None, class_=None, id=None, style=None, **kwargs):
        super().__init__(*children, **kwargs | locals_cleanup(locals(), self))


class Meter(Tag):
    def __init__(self, *children, value=None, min=None, max=None, low=None, high=None, optimum=None,
                 class_=None, id=None, style=None, **kwargs):
        super().__init__(*children, **kwargs | locals_cleanup(locals(), self))


class Progress(Tag):
    def __init__(self, *children, max=None, value=None, class_=None, id=None, style=None, **kwargs):
        super().__init__(*children, **kwargs | locals_cleanup(locals(), self))


class A(Tag):
    def __init__(self, *children, href=None, target=None, download=None, rel=None, hreflang=None,
                 typereferrerpolicy=None, media=None, form=None, name=None, class_=None, id=None, style=None,
                 **kwargs):
        super().__init__(*children, **kwargs | locals_cleanup(locals(), self))


class Img(Tag):
    def __init__(self, *children, src=None, width=None, heightsrcset=None, alt=None, crossorigin=None,
                 ismap=None, loading=None, longdesc=None, referrerpolicy=None, sizesusemap=None, class_=None,
                 id=None, style=None, **kwargs):
        super().__init__(*children, **kwargs | locals_cleanup(locals(), self))


def _run(monitor, steps, in_place):
    _IN_PLACE[0] = in_place
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(FEATURES) / 8.0
    x_all = rng.standard_normal((8192, FEATURES))
    y_all = np.tanh(x_all @ w_true) + 0.05 * rng.standard_normal(8192)
    w1 = rng.standard_normal((FEATURES, HIDDEN)) / np.sqrt(FEATURES)
    w2 = np.zeros(HIDDEN)
    rows = collections.deque(maxlen=50)                      # the page shows the last 50 steps
    start = datetime.datetime(2026, 1, 1)
    ema = None
    for step in range(steps):
        i = (step * BATCH) % 8192
        x, y = x_all[i:i + BATCH], y_all[i:i + BATCH]
        h = np.maximum(x @ w1, 0.0)
        err = h @ w2 - y
        g_h = np.outer(err, w2) * (h > 0)
        w2 -= LR * h.T @ err / BATCH
        w1 -= LR * x.T @ g_h / BATCH
        loss = float(np.mean(err ** 2))
        ema = loss if ema is None else 0.98 * ema + 0.02 * loss
        now = start + datetime.timedelta(seconds=0.25 * step)
        row = Tr(
            Td(Time(now.strftime("%H:%M:%S"), datetime=now.isoformat()), " ",
               Data(f"{loss:.4f}", value=f"{loss:.6f}", class_="loss")),
            Td(Meter(value=f"{min(ema, 1.0):.3f}", min="0", max="1", optimum="0"),
               Progress(value=str(step + 1), max=str(steps)),
               A("checkpoint", href=f"/checkpoints/{step // 500:04d}", class_="ckpt"),
               Img(src=f"/spark/loss.svg?v={step // 50}", alt="loss", loading="lazy"),
               class_="status"),
            Span(f"lr={LR:g}", class_="muted"),
            id=f"step-{step}",
        )
        rows.append(row.render())
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, in_place=True)


def fixed(monitor, steps):
    _run(monitor, steps, in_place=False)
