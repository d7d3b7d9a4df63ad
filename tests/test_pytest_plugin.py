"""The pytest plugin (``tb_leak_plugin.pytest_plugin``): a leak check as a test.

Each test writes a test file and runs it in its own ``python -m pytest``
process with the plugin loaded (``-p``, or through the ``pytest11`` entry
point once the package is installed with it): real Monitor runs, real
verdicts, and a process of its own, so that the plain-Python checks run
without TensorFlow imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
from importlib import metadata

import pytest

pytest_plugins = ["pytester"]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _plugin_args() -> list[str]:
    """``-p tb_leak_plugin.pytest_plugin`` unless the entry point loads it already."""
    if any(ep.name == "tb_leak" for ep in metadata.entry_points(group="pytest11")):
        return []
    return ["-p", "tb_leak_plugin.pytest_plugin"]


@pytest.fixture
def run_generated(pytester, monkeypatch):
    """Write ``source`` as a test module and run it under the plugin in a
    fresh pytest process; returns pytester's RunResult."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))

    def run(source: str, *args: str):
        pytester.makepyfile(test_generated=textwrap.dedent(source))
        return pytester.runpytest_subprocess(*_plugin_args(), "-p", "no:cacheprovider", "-rA", *args,
                                             timeout=240)

    return run


TF_STEP = """
    import tensorflow as tf

    import tb_leak_plugin.analysis.results as results

    x = tf.random.normal([128, 128])
    w = tf.random.normal([128, 128])


    def test_step(leak_check):
        outputs = []

        def step(i):
            y = tf.matmul(x, w)
            {keep}
            return float(tf.reduce_sum(y))

        # A step this small and flat is not always certified in a second:
        # an undecided run passes, a leak never does. (800 steps, 0.65 s of
        # training, were too few on a loaded machine: three heap walks, and
        # memory points thinned by the probes' own cost there.)
        report = leak_check(step, steps=2400, inconclusive="pass")
        assert isinstance(report, results.RunReport) and report.verdict in ("no_leak", "inconclusive")
"""


def test_tensorflow_step_keeping_its_outputs_fails(run_generated):
    result = run_generated(TF_STEP.format(keep="outputs.append(y)"))
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "tb-leak: LEAK" in out
    assert "culprits:" in out and "leak trace of" in out
    # The holder (the step's enclosing list) and what it holds.
    assert "held by:" in out and "local `outputs`" in out and "EagerTensor" in out
    assert "logdir:" in out


def test_tensorflow_step_keeping_a_float_loss_passes(run_generated):
    result = run_generated(TF_STEP.format(keep="outputs.append(float(tf.reduce_mean(y)))"))
    result.assert_outcomes(passed=1)


PLAIN_STEPS = """
    import sys
    import time

    kept = []


    def test_leaky(leak_check):
        def step(i):
            kept.append(bytearray(64 * 1024))
            time.sleep(0.001)

        leak_check(step, steps=300)


    def test_clean(leak_check):
        def step(i):
            scratch = bytearray(64 * 1024)
            time.sleep(0.001)

        report = leak_check(step, steps=500, inconclusive="pass")
        assert report.verdict in ("no_leak", "inconclusive")


    def test_zz_tensorflow_never_imported():
        assert "tensorflow" not in sys.modules
"""


def test_plain_python_step_keeping_bytearrays_fails_and_its_clean_twin_passes(run_generated):
    result = run_generated(PLAIN_STEPS)
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "FAILED test_generated.py::test_leaky" in out
    assert "tb-leak: LEAK" in out and "bytearray" in out
    assert "held by: global `test_generated.kept`" in out


MARKED_STEPS = """
    import time

    import pytest

    kept = []


    @pytest.mark.leak_check(steps=300)
    def test_leaky(step, tmp_path):
        assert tmp_path.is_dir()  # the test's own fixtures, set up once
        kept.append(bytearray(64 * 1024))
        time.sleep(0.001)


    @pytest.mark.leak_check(steps=500, warmup=10, inconclusive="pass")
    def test_clean(step):
        assert step >= 0
        scratch = bytearray(64 * 1024)
        time.sleep(0.001)
"""


def test_marker_runs_the_test_body_as_the_step(run_generated):
    result = run_generated(MARKED_STEPS, "--strict-markers")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "FAILED test_generated.py::test_leaky[leak_check]" in out
    assert "PASSED test_generated.py::test_clean[leak_check]" in out
    assert "held by: global `test_generated.kept`" in out


INCONCLUSIVE = """
    def test_inconclusive_fails(leak_check):
        leak_check(lambda step: None, steps=3, warmup=0)


    def test_inconclusive_passes_when_asked(leak_check):
        report = leak_check(lambda step: None, steps=3, warmup=0, inconclusive="pass")
        assert report.verdict == "inconclusive"
"""


def test_inconclusive_fails_by_default_and_passes_when_asked(run_generated):
    result = run_generated(INCONCLUSIVE)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "FAILED test_generated.py::test_inconclusive_fails" in out
    assert "PASSED test_generated.py::test_inconclusive_passes_when_asked" in out
    assert "tb-leak: inconclusive after 3 steps" in out
    assert "leak_check(..., steps=" in out


def test_inconclusive_message_names_the_steps_that_would_decide():
    from tb_leak_plugin import pytest_plugin

    def series(role, verdict, decide):
        return types.SimpleNamespace(role=role, trend=types.SimpleNamespace(verdict=verdict, decide_steps=decide))

    report = types.SimpleNamespace(confidence=0.9, reason="leak/process/malloc_bytes: growth not yet shown", series=[
        series("memory", "inconclusive", 150), series("memory", "inconclusive", 598),
        series("memory", "no_leak", None), series("objects", "inconclusive", 5000)])
    assert pytest_plugin.decide_steps(report) == 598
    message = pytest_plugin.inconclusive_message(report, "/tmp/run", 300)
    assert "about 598 more steps would decide" in message and "steps=898" in message
    report.series = [series("memory", "inconclusive", None)]
    assert pytest_plugin.decide_steps(report) is None
    assert "steps=600" in pytest_plugin.inconclusive_message(report, "/tmp/run", 300)


def test_plugin_is_cheap_to_import_and_inert_for_other_tests(run_generated):
    code = ("import sys, tb_leak_plugin.pytest_plugin; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'numpy', 'tb_leak_plugin')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONPATH": REPO}).stdout.strip()
    assert loaded == "['tb_leak_plugin', 'tb_leak_plugin.pytest_plugin']"
    result = run_generated("""
        import sys

        import pytest


        @pytest.fixture
        def step():
            return 7


        def test_own_step_fixture(step):
            assert step == 7


        def test_nothing_of_tb_leak_loaded():
            assert not [m for m in sys.modules if m.startswith("tb_leak_plugin.") and m != "tb_leak_plugin.pytest_plugin"]
    """)
    result.assert_outcomes(passed=2)
    markers = run_generated("", "--markers")
    assert "@pytest.mark.leak_check(steps=300" in markers.stdout.str()


def test_a_temporary_logdir_is_kept_only_when_a_message_names_it(tmp_path, monkeypatch):
    """``run_leak_check`` (and the marker) without a logdir: the directory it
    makes is removed once the step is certified no_leak, and kept where the
    failure (or the inconclusive pass) names it."""
    from tb_leak_plugin import pytest_plugin

    made = []

    def mkdtemp(prefix=""):
        path = str(tmp_path / f"{prefix}{len(made)}")
        os.mkdir(path)
        made.append(path)
        return path

    monkeypatch.setattr(pytest_plugin.tempfile, "mkdtemp", mkdtemp)
    kept = []
    with pytest.raises(pytest.fail.Exception) as failure:
        pytest_plugin.run_leak_check(lambda step: kept.append(bytearray(64 * 1024)), steps=300)
    assert os.path.isdir(made[0]) and made[0] in str(failure.value)
    kept.clear()
    report = pytest_plugin.run_leak_check(lambda step: None, steps=300, inconclusive="pass")
    assert os.path.isdir(made[1]) == (report.verdict != "no_leak"), report.verdict
