"""An eager TensorFlow image model trains on batches augmented by an ahead-of-time compiled colour kernel called through a Python extension written like Halide's generated ``python_extension`` code before issue #4859 was fixed: the argument converter takes each input array's buffer with ``PyObject_GetBuffer`` and never calls ``PyBuffer_Release``, so the buffer export keeps a reference to every freshly allocated input batch and each one (~27 KiB of pixels) outlives the step with no Python referrer (TensorFlow eager; large: ~27 KiB a step in ndarrays that only the leaked buffer views keep alive).

Source: halide/Halide issue #4859 "Python bindings leak memory in AOT
mode" (closed): "The generated "python_extension" code leaks buffers. The
function ``_convert_py_buffer_to_halide`` accesses a buffer's memory by
calling ``PyObject_GetBuffer``. At that point it holds a reference to the
input buffer, and that reference is never released ... Successful calls to
PyObject_GetBuffer() must be paired with calls to PyBuffer_Release() ...
The generated code never calls PyBuffer_Release." with a reproducer that
"calls an AOT-generated function 3000 times, with a newly allocated input
buffer for each call. The input buffers are allocated on line 30, and
leaked on line 32." Fix used here (the issue's: pair every
``PyObject_GetBuffer`` with ``PyBuffer_Release``): every buffer taken by the
converter is released after the call, so each step's input is freed with
the step.
Summary: the extension is a stand-in with the reported shape: the
converter calls the real ``PyObject_GetBuffer`` (through ``ctypes`` on a
``Py_buffer`` struct) for the input and output arrays, the "kernel" runs a
per-channel gain and gamma on the exported memory (``np.ctypeslib``
view of the buffer pointer), and in the leaky build only the output's
buffer is released. Each step draws a fresh 4x24x24x3 float32 batch from
a synthetic shapes generator, augments it through the kernel and takes an
eager ``GradientTape`` step of a small Keras classifier (3x3 average
pooling, a 32-unit hidden layer, 5 classes, Adam).

Here: 2,500 steps. The fixed converter releases both buffers.
"""
import collections
import ctypes
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

SOURCE = "https://github.com/halide/Halide/issues/4859"
SLICE = "holdout24"
STEPS = 2500
BATCH = 4
SIZE = 24
CLASSES = 5
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["ndarray", "native", "malloc", "heap", "unexplained"]},
    "fixed": {"verdict_not": "leak"},
}


class Py_buffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.py_object), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
                ("strides", ctypes.POINTER(ctypes.c_ssize_t)), ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)),
                ("internal", ctypes.c_void_p)]


_GetBuffer = ctypes.pythonapi.PyObject_GetBuffer
_GetBuffer.argtypes = [ctypes.py_object, ctypes.POINTER(Py_buffer), ctypes.c_int]
_GetBuffer.restype = ctypes.c_int
_Release = ctypes.pythonapi.PyBuffer_Release
_Release.argtypes = [ctypes.POINTER(Py_buffer)]
_Release.restype = None
PyBUF_RECORDS = 0x001C | 0x0004 | 0x0008 | 0x0010 | 0x0001      # strides, format, writable


def _convert_py_buffer_to_halide(obj):
    view = Py_buffer()
    if _GetBuffer(obj, ctypes.byref(view), PyBUF_RECORDS) != 0:
        raise TypeError("buffer export failed")
    return view


def hl_colour_jitter(inp, out, gains, gamma, release_inputs):
    """AOT-extension-like entry point: converts its buffers, runs the kernel."""
    b_in = _convert_py_buffer_to_halide(inp)
    b_out = _convert_py_buffer_to_halide(out)
    n = b_in.len // 4
    src = np.ctypeslib.as_array(ctypes.cast(b_in.buf, ctypes.POINTER(ctypes.c_float)), (n,)).reshape(inp.shape)
    dst = np.ctypeslib.as_array(ctypes.cast(b_out.buf, ctypes.POINTER(ctypes.c_float)), (n,)).reshape(out.shape)
    np.power(np.clip(src * gains, 0.0, 1.0), gamma, out=dst)
    _Release(ctypes.byref(b_out))
    if release_inputs:
        _Release(ctypes.byref(b_in))                      # the fix: every exported buffer is released


def _shapes(rng):
    y = rng.integers(0, CLASSES, BATCH)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32) / SIZE
    imgs = np.empty((BATCH, SIZE, SIZE, 3), np.float32)
    for i, c in enumerate(y):
        cx, cy, r = rng.uniform(0.3, 0.7, 3) * (1, 1, 0.5)
        mask = ((xx - cx) ** 2 + (yy - cy) ** 2 < r * r) if c % 2 == 0 else ((np.abs(xx - cx) < r) & (np.abs(yy - cy) < r))
        imgs[i] = rng.uniform(0, 0.3, 3).astype(np.float32)
        imgs[i][mask] = (np.eye(3)[c % 3] * 0.7 + 0.2 + 0.05 * c).astype(np.float32)
    return imgs, y


def _run(monitor, steps, release_inputs):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    model = keras.Sequential([keras.Input((SIZE, SIZE, 3)), keras.layers.AveragePooling2D(3),
                              keras.layers.Flatten(), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(CLASSES)])
    opt = keras.optimizers.Adam(2e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    losses = collections.deque(maxlen=100)
    out = np.empty((BATCH, SIZE, SIZE, 3), np.float32)
    for step in range(steps):
        imgs, y = _shapes(rng)                            # a newly allocated input buffer every call
        hl_colour_jitter(imgs, out, rng.uniform(0.8, 1.2, 3).astype(np.float32),
                         np.float32(rng.uniform(0.8, 1.25)), release_inputs)
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(out, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        losses.append(float(loss))
        del imgs
        monitor.sample(step)


def leaky(monitor, steps):
    _run(monitor, steps, release_inputs=False)


def fixed(monitor, steps):
    _run(monitor, steps, release_inputs=True)
