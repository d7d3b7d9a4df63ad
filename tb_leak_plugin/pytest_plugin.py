"""A leak check as a test: "this training step does not leak".

Registered as the pytest plugin ``tb_leak`` (entry point ``pytest11``); load
it without installing with ``pytest -p tb_leak_plugin.pytest_plugin``.
Nothing happens unless a test asks for it, through the fixture::

    def test_train_step_does_not_leak(leak_check):
        report = leak_check(lambda step: train_step(), steps=300)

or the marker, whose test body is the step (called once per step, with the
step number when it takes a ``step`` argument)::

    @pytest.mark.leak_check(steps=300, warmup=20)
    def test_train_step_does_not_leak(step):
        train_step()

``leak_check(step_fn, steps=300, warmup=20, inconclusive="fail", logdir=None)``
(``logdir=None``: the fixture's under pytest's ``tmp_path``; the marker's and
``run_leak_check``'s a new temporary directory, removed when the step is
certified ``no_leak`` and kept, named in the message, otherwise) runs ``step_fn(step)`` ``warmup`` times unmonitored, then ``steps`` times
under a :class:`tb_leak_plugin.Monitor` at its default settings, and judges
the run: a leak fails the test with the reason, the top culprits and who
holds them; an inconclusive run fails (``inconclusive="pass"``: passes)
saying how many more steps would decide; no leak returns the ``RunReport``.

Importing this module is cheap: it imports neither TensorFlow nor the rest of
tb-leak (the fixture does, when a test calls it), and it changes nothing for
tests that use neither the fixture nor the marker.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile

import pytest

MARKER = "leak_check"
TOP_CULPRITS = 3
_INCONCLUSIVE = ("fail", "pass")
_calls = itertools.count()


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        f"{MARKER}(steps=300, warmup=20, inconclusive='fail', logdir=None): run the test body as a training "
        "step (warmup + steps times, with a 'step' argument when it takes one) under a tb-leak Monitor and "
        "fail when it leaks (tb_leak_plugin.pytest_plugin)")


def run_leak_check(step_fn, steps: int = 300, warmup: int = 20, inconclusive: str = "fail",
                   logdir: str | None = None):
    """Run ``step_fn`` under a Monitor and judge it; see the module docstring."""
    if not callable(step_fn):
        raise TypeError(f"leak_check needs a callable step_fn(step), got {step_fn!r}")
    if inconclusive not in _INCONCLUSIVE:
        raise ValueError(f"inconclusive must be one of {_INCONCLUSIVE}, got {inconclusive!r}")
    steps, warmup = int(steps), int(warmup)
    if steps < 1 or warmup < 0:
        raise ValueError(f"leak_check needs steps >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    made_logdir = logdir is None
    if made_logdir:
        logdir = tempfile.mkdtemp(prefix="tb_leak_check_")
    # tb-leak itself only now: collecting and running other tests never imports it.
    from tb_leak_plugin.capture.monitor import Monitor
    from tb_leak_plugin.eventfile.reader import load_run
    from tb_leak_plugin.reporting.logdir import report_for_run

    for step in range(warmup):
        step_fn(step)
    monitor = Monitor(logdir)
    try:
        for step in range(warmup, warmup + steps):
            step_fn(step)
            monitor.sample(step)
    finally:
        monitor.close()
    run_dir = monitor.logdir
    report = report_for_run(load_run(os.path.basename(os.path.normpath(run_dir)) or run_dir, run_dir),
                            with_traces=False)
    if report.verdict == "no_leak" and made_logdir:
        shutil.rmtree(logdir, ignore_errors=True)  # kept only where a message names it
    if report.verdict == "leak":
        pytest.fail(leak_message(report, run_dir), pytrace=False)
    if report.verdict != "no_leak":
        message = inconclusive_message(report, run_dir, steps)
        if inconclusive == "fail":
            pytest.fail(message, pytrace=False)
        # A pass that says so in the report (pytest -rP, or the junit XML).
        print(message)
    return report


def _line(text) -> str:
    from tb_leak_plugin.units import printable

    return printable(str(text))


def leak_message(report, run_dir: str) -> str:
    """The failure message for a leak: verdict, reason, top culprits and the
    first leak trace among them (names from the data are printed inert)."""
    from tb_leak_plugin.reporting.cli import trace_lines

    lines = [f"tb-leak: LEAK (confidence {report.confidence:.0%})", _line(report.reason)]
    culprits = report.culprits[:TOP_CULPRITS]
    if culprits:
        lines.append("culprits:")
    for culprit in culprits:
        lines.append(f"  [{_line(culprit.kind)}] {_line(culprit.name)}: {_line(culprit.evidence)}")
    traced = next((c for c in culprits if (c.details or {}).get("held_by")), None)
    if traced is not None:
        lines.append(f"leak trace of {_line(traced.name)}:")
        lines += [f"  {_line(line)}" for line in trace_lines(traced.to_dict())]
    else:
        lines.append("no leak trace: the holders of the leaked objects were not traced in this run")
    lines.append(f"logdir: {_line(run_dir)}  (tb-leak analyze / tensorboard --logdir)")
    return "\n".join(lines)


def decide_steps(report) -> int | None:
    """About how many more steps would decide: the largest ``decide_steps``
    among the run's inconclusive memory series (None when none says)."""
    from tb_leak_plugin.analysis.report import ROLE_MEMORY

    needed = [s.trend.decide_steps for s in report.series
              if s.role == ROLE_MEMORY and s.trend is not None and s.trend.verdict == "inconclusive"
              and s.trend.decide_steps is not None]
    return max(needed, default=None)


def inconclusive_message(report, run_dir: str, steps: int) -> str:
    lines = [f"tb-leak: inconclusive after {steps} steps (confidence {report.confidence:.0%})",
             _line(report.reason)]
    more = decide_steps(report)
    if more is not None:
        lines.append(f"about {more:,} more steps would decide: try leak_check(..., steps={steps + more})")
    else:
        lines.append(f"more steps would decide: try leak_check(..., steps={steps * 2}) or more")
    lines.append(f"logdir: {_line(run_dir)}")
    return "\n".join(lines)


@pytest.fixture
def leak_check(tmp_path):
    """``leak_check(step_fn, steps=300, warmup=20, inconclusive="fail", logdir=None)``:
    fail the test when ``step_fn(step)`` leaks; returns the ``RunReport``."""

    def check(step_fn, steps: int = 300, warmup: int = 20, inconclusive: str = "fail", logdir=None):
        if logdir is None:
            logdir = str(tmp_path / f"tb_leak_{next(_calls)}")
        return run_leak_check(step_fn, steps=steps, warmup=warmup, inconclusive=inconclusive, logdir=logdir)

    return check


def pytest_generate_tests(metafunc):
    # A marked test that takes `step` gets it as a parameter (its value
    # changes on every call of the body; see pytest_pyfunc_call).
    if metafunc.definition.get_closest_marker(MARKER) is not None and "step" in metafunc.fixturenames:
        metafunc.parametrize("step", [0], ids=[MARKER])


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    marker = pyfuncitem.get_closest_marker(MARKER)
    if marker is None:
        return None
    if marker.args:
        raise pytest.UsageError(f"@pytest.mark.{MARKER} takes keywords only (steps=, warmup=, inconclusive=, logdir=)")
    function = pyfuncitem.obj
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    takes_step = "step" in arguments

    def step_fn(step):
        if takes_step:
            arguments["step"] = step
        function(**arguments)

    options = dict(marker.kwargs)
    run_leak_check(step_fn, **options)
    return True
