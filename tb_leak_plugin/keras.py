"""Keras callback: ``model.fit(..., callbacks=[LeakCallback(logdir)])``.

Importing this module imports Keras (through TensorFlow); the rest of the
package stays TensorFlow-free.
"""

from __future__ import annotations

from tb_leak_plugin.capture.monitor import Monitor


def _callback_base():
    try:
        import keras

        return keras.callbacks.Callback
    except ImportError:  # Keras 2 bundled with TensorFlow
        import tensorflow as tf

        return tf.keras.callbacks.Callback


class LeakCallback(_callback_base()):
    """Samples memory after every training batch of ``model.fit``.

    Steps are global batch counts across epochs (the x axis TensorBoard's
    own callback uses with ``update_freq="batch"``). Every keyword of
    :class:`~tb_leak_plugin.Monitor` is accepted, e.g.
    ``profile_steps=(100, 120)`` to record a profiler trace of those batches.
    The monitor is closed when training ends. Works with Keras 3 and with
    tf_keras (Keras 2). Under ``tf.distribute`` each task (``TF_CONFIG``)
    writes its own run, as :class:`~tb_leak_plugin.Monitor` does (``run_name=``
    to name it).

    ``stop_on_leak=True`` stops ``model.fit`` (``model.stop_training``) once
    a leak is confirmed while it trains; the report is in ``leak_report``.
    """

    def __init__(self, logdir: str | None = None, *, stop_on_leak: bool = False, **monitor_options):
        super().__init__()
        self.logdir = logdir
        self.stop_on_leak = bool(stop_on_leak)
        #: The report that confirmed a leak while training (None while none has).
        self.leak_report = None
        user_on_leak = monitor_options.pop("on_leak", None)

        def on_leak(report):
            self.leak_report = report
            if self.stop_on_leak and getattr(self, "model", None) is not None:
                self.model.stop_training = True
            if user_on_leak is not None:
                user_on_leak(report)

        monitor_options["on_leak"] = on_leak
        self._options = monitor_options
        self.monitor: Monitor | None = None
        self._step = 0

    def on_train_begin(self, logs=None):
        if self.monitor is None:
            self.monitor = Monitor(self.logdir, **self._options)

    def on_train_batch_end(self, batch, logs=None):
        if self.monitor is not None:
            self.monitor.sample(self._step)
        self._step += 1

    def on_train_end(self, logs=None):
        if self.monitor is not None:
            self.monitor.close()
            self.monitor = None

    # tf_keras (Keras 2: ``TF_USE_LEGACY_KERAS=1``, the Keras that runs
    # ``model.fit`` under MultiWorkerMirroredStrategy) asks its callbacks
    # which batch hooks they implement.
    def _implements_train_batch_hooks(self):
        return True

    def _implements_test_batch_hooks(self):
        return False

    def _implements_predict_batch_hooks(self):
        return False
