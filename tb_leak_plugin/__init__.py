"""tb-leak: find memory leaks in training loops, inside TensorBoard.

Importing this package never imports TensorFlow; the TensorFlow probes and
the ``tf.summary`` path use TensorFlow only when the program has imported it.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

__all__ = ["Monitor", "summary", "keras", "__version__"]


def __getattr__(name):
    # Lazy so that `import tb_leak_plugin` stays cheap and TensorFlow-free.
    if name == "Monitor":
        from tb_leak_plugin.capture.monitor import Monitor

        return Monitor
    if name in ("summary", "keras"):
        return importlib.import_module(f"tb_leak_plugin.{name}")
    raise AttributeError(f"module 'tb_leak_plugin' has no attribute {name!r}")
