"""A Keras training job audits every batch from a callback through a function decorated with an annotated-logging library written like github/annotated-logger before pull request #83: the decorator builds a fresh, uniquely named logger (``annotated_logger.<uuid4>``) with its own annotation filter for every call, so that annotations never mix between calls, and nothing ever removes it, so ``logging.root.manager.loggerDict`` keeps one ``Logger`` with its filter and annotation dicts per batch (``model.fit`` + ``LeakCallback``; grows every batch, small: ~1.4 KiB a batch, Python objects).

Source: github/annotated-logger pull request #83 "Clean up loggers in root
manager's loggerDict to prevent memory buildup" (merged): "This PR fixes a
memory \"leak\", where every decorated function left a logger in the
``logging.root.manager.loggerDict``. Any process that ran for long enough or
made lots of calls to annotated methods would start to see memory build up.
We now remove the logger for the decorated function in a finally so it's
removed regardless of if the function raised an exception." Fix used here
(the PR's): the wrapper's ``finally`` does
``logging.root.manager.loggerDict.pop(logger.logger.name, None)``.
Summary: the library is a small stand-in with annotated-logger's shape
(``AnnotatedLogger.annotate_logs`` decorator that injects an
``AnnotatedAdapter`` built by ``_generate_logger`` from
``logging.getLogger(f"{root_name}.{uuid.uuid4()}")`` and an
``AnnotatedFilter`` holding the call's annotations, plus the shared
``annotated_logger`` base logger with a file handler). The model is a Keras
48-96-96-5 softmax classifier trained with ``model.fit`` (Adam, batches of
64, 100 batches an epoch) on synthetic clusters; the callback's
``on_train_batch_end`` calls ``audit_batch``, which annotates the call with
the epoch, batch, loss and learning rate and logs a line every 50 batches
or when the loss jumps.

Here: 6,000 batches (60 epochs). The fixed decorator pops the call's logger
in ``finally``.

Checked without tb-leak (psutil RSS, gc objects; fresh process, TF 2.21 /
Keras 3.15 / Python 3.11, numpy 2.4; a stub callback in place of
``LeakCallback``; RSS read before each object count, at the marks only):
leaky 571.1 / 573.1 / 574.6 / 576.2 / 577.6 MiB RSS at 20 / 40 / 60 / 80 % /
end (563.9 MiB at the first batch; ~1.4 KiB a batch: a ``Logger`` with its
``_cache`` dict, an ``AnnotatedFilter`` with its two annotation dicts and
the uuid name in ``loggerDict``) with gc objects 331,037 at the first batch,
then 336,672 / 342,672 / 348,672 / 354,672 / 360,672 at the same marks (five
a batch), 23.8 s for 6,000 batches (~4 ms a batch); fixed 569.4 / 569.9 /
570.3 / 570.5 / 570.6 MiB (Keras's own settling) with objects 330,672 /
330,673 / 330,675 / 330,677 / 330,679, 22.4 s. 29-31 s a variant in its
process, imports included.
"""
import functools
import logging
import os
import shutil
import tempfile
import uuid

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
import keras

import tb_leak_plugin
import tb_leak_plugin.keras

SOURCE = "https://github.com/github/annotated-logger/pull/83"
SLICE = "holdout21"
STEPS = 6000            # batches; 100 per epoch, 60 epochs
PER_EPOCH = 100
BATCH = 64
FEATURES = 48
CLASSES = 5
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["Logger", "AnnotatedFilter", "dict", "Filter"],
              "holder_any": ["loggerDict", "manager", "logging"]},
    "fixed": {"verdict_not": "leak"},
}


class AnnotatedFilter(logging.Filter):
    def __init__(self, annotations=None, class_annotations=None, plugins=None):
        super().__init__()
        self.annotations = dict(annotations or {})
        self.class_annotations = dict(class_annotations or {})
        self.plugins = plugins or []

    def filter(self, record):
        for key, value in {**self.class_annotations, **self.annotations}.items():
            setattr(record, key, value)
        return True


class AnnotatedAdapter(logging.LoggerAdapter):
    def __init__(self, logger, annotated_filter):
        self.filter = annotated_filter
        self.logger = logger
        self.logger.addFilter(annotated_filter)
        super().__init__(logger)

    def process(self, msg, kwargs):
        return msg, kwargs

    def annotate(self, *, persist=False, **kwargs):
        (self.filter.class_annotations if persist else self.filter.annotations).update(kwargs)


class AnnotatedLogger:
    def __init__(self, annotations=None, name="annotated_logger", cleanup=True, log_path=None):
        self.logger_root_name = name
        self.logger_base = logging.getLogger(name)
        self.logger_base.setLevel(logging.INFO)
        self.logger_base.propagate = False
        if log_path:
            handler = logging.FileHandler(log_path)
            handler.setFormatter(logging.Formatter("{created} {levelname} {name} {message} {action}", style="{"))
            self.logger_base.handlers = [handler]
        self.annotations = annotations or {}
        self.cleanup = cleanup

    def _generate_logger(self, function):
        logger = logging.getLogger(f"{self.logger_root_name}.{uuid.uuid4()}")
        annotations = {"action": f"{function.__module__}:{function.__qualname__}"}
        annotations.update(self.annotations)
        return AnnotatedAdapter(logger, AnnotatedFilter(annotations=annotations))

    def annotate_logs(self):
        def decorator(function):
            @functools.wraps(function)
            def wrap_function(*args, **kwargs):
                logger = self._generate_logger(function)
                try:
                    return function(logger, *args, **kwargs)
                finally:
                    if self.cleanup:                         # the fix (annotated-logger #83)
                        logging.root.manager.loggerDict.pop(logger.logger.name, None)
            return wrap_function
        return decorator


class BatchAudit(keras.callbacks.Callback):
    def __init__(self, annotated):
        super().__init__()
        self.epoch = 0
        self.last_loss = None

        @annotated.annotate_logs()
        def audit_batch(annotated_logger, epoch, batch, loss, lr):
            annotated_logger.annotate(epoch=epoch, batch=batch, loss=round(loss, 5), lr=lr)
            jumped = self.last_loss is not None and loss > 1.5 * self.last_loss
            if batch % 50 == 0 or jumped:
                annotated_logger.info("batch audited")
            self.last_loss = loss

        self.audit_batch = audit_batch

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self.lr = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))

    def on_train_batch_end(self, batch, logs=None):
        self.audit_batch(self.epoch, batch, float(logs["loss"]), self.lr)


def _fit(logdir, steps, cleanup):
    keras.utils.set_random_seed(0)
    tmp = tempfile.mkdtemp(prefix="s250_")
    annotated = AnnotatedLogger(annotations={"job": "churn-model"}, cleanup=cleanup,
                                log_path=os.path.join(tmp, "audit.log"))
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((CLASSES, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, PER_EPOCH * BATCH)
    x = (centers[y] + 1.2 * rng.standard_normal((len(y), FEATURES))).astype(np.float32)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(96, activation="relu"),
                              keras.layers.Dense(96, activation="relu"), keras.layers.Dense(CLASSES)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    try:
        model.fit(x, y.astype(np.int32), batch_size=BATCH, epochs=max(1, steps // PER_EPOCH), verbose=0,
                  shuffle=True, callbacks=[BatchAudit(annotated), tb_leak_plugin.keras.LeakCallback(logdir)])
    finally:
        for h in annotated.logger_base.handlers:
            h.close()
        annotated.logger_base.handlers = []
        shutil.rmtree(tmp, ignore_errors=True)


def leaky_fit(logdir, steps):
    _fit(logdir, steps, cleanup=False)


def fixed_fit(logdir, steps):
    _fit(logdir, steps, cleanup=True)
