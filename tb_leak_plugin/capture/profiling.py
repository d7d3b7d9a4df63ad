"""Capture a profiler trace over a window of training steps.

The monitor only sees the *end* of each training step, so the step marker
for step ``k`` is opened when step ``k - 1`` ends and closed when step ``k``
ends. Everything the step allocates therefore falls inside its marker, which
is what the trace analysis uses to tell "left memory behind in step k" from
"allocated once, before the loop".

TensorFlow is used only when the program has already imported it: this
module never imports it, so a plain Python or PyTorch loop pays nothing.
Nothing here raises into the training loop; the first failure is logged
once and the window gives up.
"""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger(__name__)

# The name of the step marker event; the trace analysis looks for events that
# carry a ``step_num`` stat, whatever their name.
STEP_MARKER_NAME = "train"


class ProfilerWindow:
    """Profile the training steps after ``start_step`` up to ``stop_step``.

    Call :meth:`on_step_end` after every training step. When step
    ``start_step`` ends the profiler starts (``tf.profiler.experimental.start
    (logdir)``); steps ``start_step + 1`` ... ``stop_step`` are each wrapped
    in a ``tf.profiler.experimental.Trace('train', step_num=k, _r=1)``
    marker; when step ``stop_step`` ends the profiler stops and writes
    ``<logdir>/plugins/profile/<session>/<host>.xplane.pb``. :meth:`close`
    stops early (for example when training ends inside the window).

    A program that skips past the window (its first reported step is already
    ``>= stop_step``) records nothing. Another profiler session already
    running, TensorFlow not imported or any profiler error: logged once, and
    the window gives up without raising.

    Attributes:
      logdir: where the profiler writes (usually the run's log directory).
      start_step: the step whose end starts the profiler.
      stop_step: the last step recorded (its end stops the profiler).
      state: ``"waiting"``, ``"recording"``, ``"done"`` or ``"failed"``.
      error: what went wrong when ``state == "failed"``, else None.
      steps_recorded: how many step markers were closed.
    """

    def __init__(self, logdir: str, start_step: int, stop_step: int):
        self.logdir = str(logdir)
        self.start_step = int(start_step)
        self.stop_step = int(stop_step)
        self.state = "waiting"
        self.error: str | None = None
        self.steps_recorded = 0
        self._marker = None
        if self.stop_step <= self.start_step:
            self._give_up(
                f"stop_step ({self.stop_step}) must be greater than start_step "
                f"({self.start_step}); no profile will be recorded"
            )

    @property
    def recording(self) -> bool:
        return self.state == "recording"

    def on_step_end(self, step: int) -> None:
        """Advance the window after training step ``step`` ended. Never raises."""
        if self.state in ("done", "failed"):
            return
        try:
            self._on_step_end(int(step))
        except Exception as error:  # never into the training loop
            self._give_up(f"profiler window failed at step {step}: {error!r}")

    def close(self) -> None:
        """Stop recording now (idempotent). Never raises."""
        if self.state == "recording":
            try:
                self._close_marker()
                self._stop_profiler()
            except Exception as error:
                self._give_up(f"stopping the profiler failed: {error!r}")
                return
        if self.state != "failed":
            self.state = "done"

    def __enter__(self) -> "ProfilerWindow":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- internals -----------------------------------------------------------

    def _on_step_end(self, step: int) -> None:
        if self.state == "waiting":
            if step >= self.stop_step:
                self.state = "done"  # the window lies in the past
                return
            if step < self.start_step:
                return
            tf = self._tensorflow()
            if tf is None:
                return
            tf.profiler.experimental.start(self.logdir)
            self.state = "recording"
            self._open_marker(tf, step + 1)
            return
        # recording
        self._close_marker()
        if step >= self.stop_step:
            self._stop_profiler()
            self.state = "done"
            return
        tf = sys.modules.get("tensorflow")
        self._open_marker(tf, step + 1)

    def _tensorflow(self):
        tf = sys.modules.get("tensorflow")
        if tf is None or not hasattr(tf, "profiler"):
            self._give_up(
                "TensorFlow is not imported by this program; the profiler window "
                "records TensorFlow traces only"
            )
            return None
        return tf

    def _open_marker(self, tf, step: int) -> None:
        marker = tf.profiler.experimental.Trace(STEP_MARKER_NAME, step_num=step, _r=1)
        marker.__enter__()
        self._marker = marker

    def _close_marker(self) -> None:
        marker, self._marker = self._marker, None
        if marker is not None:
            marker.__exit__(None, None, None)
            self.steps_recorded += 1

    def _stop_profiler(self) -> None:
        tf = sys.modules.get("tensorflow")
        self.state = "done"
        if tf is not None:
            tf.profiler.experimental.stop()

    def _give_up(self, message: str) -> None:
        was_recording = self.state == "recording"
        self.state = "failed"
        self.error = message
        logger.warning("tb-leak: %s", message)
        if was_recording:
            # Leave no profiler session running behind the user's back.
            self._marker = None
            tf = sys.modules.get("tensorflow")
            try:
                if tf is not None:
                    tf.profiler.experimental.stop()
            except Exception:
                pass
