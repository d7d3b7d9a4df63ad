"""A ``PyDataset`` builds each batch from scraped product pages: every page is parsed into a DOM whose element wrappers come from a lookup class, and that class keeps its document -> wrappers map in a class attribute (``DomElementClassLookup._lookups``) that is filled per document and never cleared, so every parsed page, with its whole tree and text, stays reachable from the class for the rest of the run (``model.fit`` on a ``PyDataset``; from the start).

Source: scrapinghub/extruct PR #60 "Fix memory leak, issue-59": "Resets a
class variable after each extraction to prevent memory leak"; the
review asked "why is ``_lookups`` a class attribute instead of an
instance attribute? ... if it would be an instance attribute, then it
would be cleaned up automatically since we create a new parser in
``extruct.extract``", and the merged fix "puts the ``_lookups`` variable
into the constructor" (``self._lookups = {}``). Fix used here (the
PR's): the map is an instance attribute of the lookup that each page's
parser creates, so it goes away with the parser.
Summary: a price-range classifier trained on features extracted from
microdata-like attributes (``itemprop``) of product pages; lxml's
element-class lookup is replaced by a small ``xml.etree`` equivalent.

Here: batches of 8 pages (~0.6 KiB of markup each, 16 elements), 32
hashed features, a 32-64-4 model, 20 batches an epoch, 150 epochs. The
fixed twin keeps the map on the lookup instance.

Checked without tb-leak (psutil RSS, gc objects; fresh process, Python
3.11, numpy 2.4, TF 2.21 / Keras 3.15; ``LeakCallback`` replaced by a
stub callback): leaky
606.4 / 649.3 / 692.4 / 735.3 / 779.1 MiB RSS at 20 / 40 / 60 / 80 % /
end (~73 KiB a batch, ~9 KiB a page) with gc objects 486,173 / 644,576 /
802,976 / 961,376 / 1,119,773 (264 a batch: every page's elements and
their wrappers), 13.2 s for 3,000 batches; fixed 563.8 / 563.9 / 564.0
/ 564.0 / 564.0 MiB with objects flat (327,663 -> 327,663), 12.4 s.
"""
import os
import xml.etree.ElementTree as ET
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/scrapinghub/extruct/pull/60"
SLICE = "holdout14"
STEPS = 3000           # batches; 20 per epoch, 150 epochs
STEPS_PER_EPOCH = 20
PAGES = 8
FEATURES = 32
CLASSES = 4
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Element", "DomElement", "dict", "str", "list"],
              "holder_any": ["_lookups", "DomElementClassLookup"]},
    "fixed": {"verdict_not": "leak"},
}


class DomElement:
    __slots__ = ("node", "doc")

    def __init__(self, node, doc):
        self.node = node
        self.doc = doc

    def prop(self):
        return self.node.get("itemprop"), (self.node.text or "").strip()


class DomElementClassLookup:
    _lookups = {}                                  # the leak: shared by every lookup, never cleared

    def __init__(self, per_instance):
        if per_instance:
            self._lookups = {}                     # the fix: one map per lookup (per parser)

    def wrap(self, doc_id, root):
        table = self._lookups.setdefault(doc_id, {})
        for node in root.iter():
            table[id(node)] = DomElement(node, root)
        return table


def _page(rng, label, serial):
    price = int((label + rng.random()) * 250)
    rows = "".join('<li itemprop="feature">%s-%d-%d</li>' % (rng.choice(["usb", "wifi", "led", "gps"]),
                                                             serial, k) for k in range(8))
    return ('<html><body><div itemscope="1" itemtype="Product"><h1 itemprop="name">item %d</h1>'
            '<span itemprop="price">%d</span><span itemprop="brand">b%d</span><ul>%s</ul>'
            '<p itemprop="description">%s</p></div></body></html>'
            % (serial, price, rng.integers(0, 50), rows, "lorem ipsum " * 6))


class ProductPages(keras.utils.PyDataset):
    def __init__(self, per_instance, **kw):
        super().__init__(**kw)
        self.per_instance = per_instance
        self.rng = np.random.default_rng(0)
        self.serial = 0

    def __len__(self):
        return STEPS_PER_EPOCH

    def __getitem__(self, idx):
        x = np.zeros((PAGES, FEATURES), np.float32)
        y = self.rng.integers(0, CLASSES, PAGES)
        for i in range(PAGES):
            self.serial += 1
            root = ET.fromstring(_page(self.rng, int(y[i]), self.serial))
            lookup = DomElementClassLookup(self.per_instance)      # a new parser per page, as extruct does
            for el in lookup.wrap(self.serial, root).values():
                key, text = el.prop()
                if key == "price":
                    x[i, 0] = float(text) / 1000.0
                elif key:
                    x[i, 1 + zlib.crc32((key + text[:4]).encode()) % (FEATURES - 1)] += 0.1
        return x, y


def _fit(logdir, steps, per_instance):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    epochs = max(1, steps // STEPS_PER_EPOCH)
    model.fit(ProductPages(per_instance), epochs=epochs, verbose=0,
              callbacks=[tb_leak_plugin.keras.LeakCallback(logdir)])


def leaky_fit(logdir, steps):
    _fit(logdir, steps, per_instance=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, per_instance=True)
