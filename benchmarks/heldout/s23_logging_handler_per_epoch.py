"""A record-keeping logging handler added to the same logger at every epoch (no TensorFlow).

Source: google/openhtf#144 "TestState initialized logging every time".
Summary: the per-run set-up code calls ``logger.addHandler(RecordHandler(...))``
each time a run starts; ``logging.getLogger(name)`` returns the same global
logger, so the handlers stack up, every old handler keeps receiving (and
storing) every later record, and memory grows quadratically. Fix from the
thread: configure the logger once, and detach (remove) the run's record handler
when the run ends.

Here: a trainer object is created per epoch (200 steps) and attaches a handler
that keeps the epoch's log records; one INFO record per step.

Checked without tb-leak (psutil RSS, fresh process, TF 2.21 / Keras 3.15 /
Python 3.11): leaky +7.9 MiB RSS from 20 % of the run to the end (+7.0 MiB
tracemalloc, +8.3 k objects), fixed +0.0 MiB (+0.1 MiB traced); ~0.02 ms a
step, growing with the number of stacked handlers.
"""
import logging

SOURCE = "https://github.com/google/openhtf/issues/144"
SLICE = "holdout2"
STEPS = 10000
STEPS_PER_EPOCH = 200
EXPECT = {
    "leaky": {"verdict": "leak", "culprit_any": ["LogRecord", "RecordHandler", "Handler", "list", "dict"]},
    "fixed": {"verdict_not": "leak"},
}


class RecordHandler(logging.Handler):
    """Keeps the records of one epoch, e.g. to attach them to the epoch's report."""

    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


class EpochRunner:
    def __init__(self, epoch, logger, detach):
        self.epoch = epoch
        self.logger = logger
        self.detach = detach
        self.handler = RecordHandler()
        logger.addHandler(self.handler)

    def run(self, monitor, first_step, n, state):
        for step in range(first_step, first_step + n):
            # a little arithmetic as the "training" work
            state = (state * 1103515245 + 12345) % 2147483648
            loss = 1.0 / (1.0 + step) + (state % 1000) * 1e-6
            self.logger.info("epoch %d step %d loss %.5f", self.epoch, step, loss)
            monitor.sample(step)
        summary = len(self.handler.records)
        if self.detach:
            self.logger.removeHandler(self.handler)
            self.handler.close()
        return state, summary


def _loop(monitor, steps, name, detach):
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    state, step, epoch = 1, 0, 0
    while step < steps:
        n = min(STEPS_PER_EPOCH, steps - step)
        state, _ = EpochRunner(epoch, logger, detach).run(monitor, step, n, state)
        step += n
        epoch += 1


def leaky(monitor, steps):
    _loop(monitor, steps, "heldout.s23.leaky", detach=False)


def fixed(monitor, steps):
    _loop(monitor, steps, "heldout.s23.fixed", detach=True)
