"""Hostile logdirs: names that try to drive a terminal or a markdown renderer,
names that are not UTF-8, files that are not files, directories nobody may
list, nesting deeper than Python's recursion limit, ten thousand runs, a
crash inside the tool, and profiler paths that must not leave the server.

Every test here failed on the tool before its fix. Logdirs are written with
the TF-free EventWriter; the file runs in well under a minute on 2 cores.
The restarted-job comparison against a real TensorBoard is in
``test_restart_tensorboard.py``.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading

import numpy as np
import pytest

from tb_leak_plugin.eventfile import reader as loading
from tb_leak_plugin.eventfile.writer import RecordEventWriter
from tb_leak_plugin.metadata import SeriesInfo
from tb_leak_plugin.reporting import cli
from tb_leak_plugin.summary import EventWriter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest_plugin as cp  # noqa: E402

RSS = SeriesInfo("process", "rss_bytes", "bytes")
TRACKED = SeriesInfo("gc", "tracked_objects", "count")

FORGED = "FAKE\n== run ok: no leak (confidence 100%)"
OSC_TITLE = "\x1b]0;pwned\x07"  # retitles an xterm
EVIL_TYPE = "evil\x1b[2J\r\ntype\u202e"  # an object type name: clear screen, new line, RTL override
MARKDOWN_NAME = "a~~struck~~ &amp; @octocat \x1b[31mred"
# Anything a terminal would act on; "\n" is allowed only between report lines.
UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def write_run(run_dir: str, leaky: bool = True, steps: int = 120, seed: int = 0, type_name: str | None = None):
    rng = np.random.default_rng(seed)
    writer = EventWriter(run_dir)
    objects = SeriesInfo("objects", "live_count", "count", type_name) if type_name else None
    for step in range(steps):
        sample = [(RSS, 2e8 + (1e6 * step if leaky else 0.0) + rng.normal(0, 20_000)),
                  (TRACKED, 9e4 + rng.normal(0, 2))]
        if objects is not None:
            sample.append((objects, 10.0 + 3 * step))
        writer.write(step, sample, wall_time=1_700_000_000 + step)
    writer.close()


def run_cli(capsys, *args):
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_module(*args, timeout=120, env=None):
    return subprocess.run([sys.executable, "-m", "tb_leak_plugin", *args], capture_output=True,
                          timeout=timeout, env=dict(os.environ, **(env or {})))


@pytest.fixture(scope="module")
def hostile_logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    write_run(str(root / (FORGED + OSC_TITLE)), leaky=True)
    write_run(str(root / "types"), leaky=True, seed=1, type_name=EVIL_TYPE)
    write_run(str(root / MARKDOWN_NAME), leaky=True, seed=2)
    write_run(str(root / "clean"), leaky=False, seed=3)
    return str(root)


# ------------------------------------------------------------ 6, 14: escaping


def test_text_report_cannot_forge_lines_or_drive_the_terminal(hostile_logdir, capsys):
    code, text, _ = run_cli(capsys, "analyze", hostile_logdir)
    assert code == 0
    assert not UNSAFE.findall(text), sorted(set(UNSAFE.findall(text)))
    lines = text.splitlines()
    # One "== run" line per run, none of them forged by a name.
    assert len([line for line in lines if line.startswith("== run ")]) == 4
    assert not [line for line in lines if line.startswith(("FAKE", "== run ok"))]
    assert "FAKE\\x0a== run ok: no leak (confidence 100%)\\x1b]0;pwned\\x07: LEAK" in text
    # A type name (a culprit and a series tag) is shown escaped too.
    assert "evil\\x1b[2J\\x0d\\x0atype\\u202e" in text


def test_trace_session_and_host_names_are_escaped_in_text():
    report = {"logdir": "/l", "warnings": [], "groups": [], "runs": [{
        "run": "r", "verdict": "no_leak", "confidence": 1.0, "reason": "flat", "growth_bytes_per_step": None,
        "series": [], "culprits": [], "hints": [], "warnings": ["bad\x1b[8m\nfile"],
        "traces": {"sessions": [
            {"session": "s\x1b]0;t\x07", "host": "h\nFAKE line", "error": "e\x1b[1A", "coverage_note": ""},
            {"session": "s2", "host": "h\u2028x", "error": None, "coverage_note": "note\x9b2J"},
        ]}}]}
    text = cli.format_text(report)
    assert not UNSAFE.findall(text)
    assert "   trace s\\x1b]0;t\\x07/h\\x0aFAKE line: error: e\\x1b[1A" in text
    assert "   trace s2/h\\u2028x: note\\x9b2J" in text
    assert "   warning: bad\\x1b[8m\\x0afile" in text
    assert not [line for line in text.splitlines() if line.startswith("FAKE")]


def test_markdown_escapes_strikethrough_entities_mentions_and_escapes(hostile_logdir, capsys):
    code, markdown, _ = run_cli(capsys, "analyze", hostile_logdir, "--format", "markdown")
    assert code == 0
    assert not UNSAFE.findall(markdown)
    assert "~~" not in markdown
    assert not re.search(r"(?<!\\)&amp;", markdown)  # shown as the text "&amp;", not as "&"
    assert "\\&amp;" in markdown
    assert "@octocat" not in markdown and "@&#8203;octocat" in markdown
    assert "\\x1b\\[31mred" in markdown.replace("\\\\", "\\")
    rows = [line for line in markdown.splitlines() if line.startswith("| ") and "LEAK" in line]
    assert len(rows) == 3  # no name broke the table


def test_json_keeps_names_exact(hostile_logdir, capsys):
    code, out, _ = run_cli(capsys, "analyze", hostile_logdir, "--format", "json")
    assert code == 0
    runs = {run["run"]: run for run in json.loads(out)["runs"]}
    assert set(runs) == {FORGED + OSC_TITLE, "types", MARKDOWN_NAME, "clean"}
    assert any(c["name"] == EVIL_TYPE for c in runs["types"]["culprits"])


# ------------------------------------------------ 7: non-UTF-8 names, exit 3


@pytest.fixture(scope="module")
def non_utf8_logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("bytes")
    write_run(os.fsdecode(os.path.join(os.fsencode(str(root)), b"bad\xff\xfename")), leaky=True)
    write_run(str(root / "fine"), leaky=False, seed=4)
    return str(root)


@pytest.mark.parametrize("output", ["text", "markdown"])
def test_non_utf8_run_name_prints_escaped_on_a_strict_utf8_stdout(non_utf8_logdir, output):
    env = {"PYTHONIOENCODING": "utf-8:strict", "LC_ALL": "C.UTF-8"}
    result = run_module("analyze", non_utf8_logdir, "--format", output, env=env)
    assert result.returncode == 0, result.stderr.decode("utf-8", "replace")[-2000:]
    text = result.stdout.decode("utf-8")  # strict: valid UTF-8
    assert "bad\\xff\\xfename" in text.replace("\\\\", "\\")
    result = run_module("analyze", non_utf8_logdir, "--format", output, "--fail-on-leak", env=env)
    assert result.returncode == 1 and result.stdout  # the verdict, with the report printed


def test_non_utf8_run_name_is_read_and_judged(non_utf8_logdir, capsys):
    code, out, _ = run_cli(capsys, "analyze", non_utf8_logdir, "--format", "json")
    assert code == 0
    runs = {run["run"]: run for run in json.loads(out)["runs"]}
    name = os.fsdecode(b"bad\xff\xfename")
    assert runs[name]["verdict"] == "leak" and not runs[name]["warnings"]


def test_internal_error_exits_3_never_1(non_utf8_logdir, capsys, monkeypatch):
    from tb_leak_plugin.reporting import logdir as analyze

    def broken(*args, **kwargs):
        raise RuntimeError("boom\x1b[2J")

    monkeypatch.setattr(analyze, "analyze_logdir", broken)
    code, out, err = run_cli(capsys, "analyze", non_utf8_logdir, "--fail-on-leak")
    assert code == cli.EXIT_INTERNAL == 3
    assert out == ""
    assert err.startswith("tb-leak: error: internal error: RuntimeError: boom\\x1b[2J")
    assert "\x1b" not in err


def test_exit_statuses_are_documented(capsys):
    assert cli.main(["analyze", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert "exit status:" in help_text
    assert re.search(r"^\s+3\s+internal error", help_text, re.M)
    assert re.search(r"^\s+1\s+--fail-on-leak", help_text, re.M)
    assert "3 for an internal" in cli.__doc__


def test_stdout_that_cannot_encode_the_report_still_gets_it(hostile_logdir, capsys, monkeypatch):
    capsys.readouterr()
    ascii_out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")  # PYTHONIOENCODING=ascii
    monkeypatch.setattr(sys, "stdout", ascii_out)
    assert cli.main(["analyze", hostile_logdir, "--format", "markdown"]) == 0
    ascii_out.flush()
    written = ascii_out.buffer.getvalue().decode("ascii")
    assert "\\U0001f534 LEAK" in written  # the red circle, escaped rather than a crash


def test_a_reader_that_stops_early_does_not_turn_into_a_crash(hostile_logdir):
    process = subprocess.Popen([sys.executable, "-m", "tb_leak_plugin", "analyze", hostile_logdir],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # `| head -0`: the pipe is gone before the report is written
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err.decode()[-2000:]
    assert b"Traceback" not in err


# ----------------------------------------------------------- 10: FIFOs


def test_a_fifo_named_like_an_event_file_is_skipped_with_a_warning(tmp_path):
    write_run(str(tmp_path / "good"), leaky=True)
    os.mkfifo(tmp_path / "good" / "events.out.tfevents.9999999999.fifo")
    (tmp_path / "only_fifo").mkdir()
    os.mkfifo(tmp_path / "only_fifo" / "events.out.tfevents.1.host")
    result = run_module("analyze", str(tmp_path), "--format", "json", timeout=60)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    runs = {run["run"]: run for run in json.loads(result.stdout)["runs"]}
    assert runs["good"]["verdict"] == "leak"
    assert any("not a regular file (a FIFO)" in w for w in runs["good"]["warnings"])
    assert any("not a regular file (a FIFO)" in w for w in runs["only_fifo"]["warnings"])


def test_opening_a_fifo_directly_never_blocks(tmp_path):
    fifo = str(tmp_path / "events.out.tfevents.x")
    os.mkfifo(fifo)
    warnings: list[str] = []
    worker = threading.Thread(target=lambda: list(loading.iter_record_chunks(fifo, warnings)), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # blocked in open(): give it a writer so the thread can end
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading a FIFO blocked")
    assert len(warnings) == 1 and "not a regular file (a FIFO)" in warnings[0]


# ------------------------------------------- 13: depth; unreadable directories


def _deep_chain(top: str, levels: int, name: str = "d") -> str:
    os.mkdir(top)
    path = top
    for _ in range(levels):
        path = os.path.join(path, name)
        os.mkdir(path)
    return path


def _remove_chain(top: str, bottom: str) -> None:
    """Remove a chain made by _deep_chain, deepest first, without recursion:
    shutil.rmtree (and pytest's clean-up of old temporary directories, which
    uses it) recurses once per level and would hit the recursion limit."""
    path = bottom
    while True:
        for name in os.listdir(path):
            child = os.path.join(path, name)
            if not os.path.isdir(child) or os.path.islink(child):
                os.unlink(child)
            else:
                shutil.rmtree(child)  # a shallow run directory
        os.rmdir(path)
        if path == top:
            return
        path = os.path.dirname(path)


def _too_long_chain(top: str, levels: int = 20, name_length: int = 250) -> None:
    """Directories whose path exceeds PATH_MAX (made relative to each parent)."""
    fd = os.open(top, os.O_RDONLY)
    try:
        for level in range(levels):
            name = f"{level:03d}" + "x" * (name_length - 3)
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def test_a_thousand_levels_deep_logdir_keeps_its_shallow_runs(tmp_path, capsys):
    write_run(str(tmp_path / "shallow"), leaky=True)
    deep = _deep_chain(str(tmp_path / "deep"), 1000)
    write_run(deep, leaky=False, steps=30)
    (tmp_path / "long").mkdir()
    _too_long_chain(str(tmp_path / "long"))
    try:
        code, out, err = run_cli(capsys, "analyze", str(tmp_path), "--format", "json")
        assert code == 0, err
        data = json.loads(out)
        runs = {run["run"]: run for run in data["runs"]}
        assert runs["shallow"]["verdict"] == "leak"
        assert "deep/" + "/".join(["d"] * 1000) in runs
        assert any("File name too long" in w and "skipped it" in w for w in data["warnings"]), data["warnings"]
    finally:
        shutil.rmtree(tmp_path / "long", ignore_errors=True)
        _remove_chain(str(tmp_path / "deep"), deep)


def test_an_unlistable_directory_is_skipped_with_a_warning(tmp_path, monkeypatch, capsys):
    # Root may list anything, so the refusal is simulated where the walk lists directories.
    write_run(str(tmp_path / "open"), leaky=True)
    write_run(str(tmp_path / "locked" / "inner"), leaky=True, seed=5)
    real_scandir = os.scandir
    locked = str(tmp_path / "locked")

    def scandir(path="."):
        if os.fspath(path) == locked:
            raise PermissionError(13, "Permission denied", locked)
        return real_scandir(path)

    monkeypatch.setattr(loading.os, "scandir", scandir)
    code, out, _ = run_cli(capsys, "analyze", str(tmp_path))
    assert code == 0
    assert "== run open: LEAK" in out
    assert f"warning: {locked}: cannot list this directory (Permission denied); skipped it" in out


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can list a chmod 000 directory")
def test_a_chmod_000_directory_is_skipped_with_a_warning(tmp_path, capsys):
    write_run(str(tmp_path / "open"), leaky=True)
    write_run(str(tmp_path / "locked" / "inner"), leaky=True, seed=5)
    os.chmod(tmp_path / "locked", 0)
    try:
        code, out, _ = run_cli(capsys, "analyze", str(tmp_path))
    finally:
        os.chmod(tmp_path / "locked", stat.S_IRWXU)
    assert code == 0
    assert "== run open: LEAK" in out and "cannot list this directory" in out


def test_ten_thousand_runs_with_hostile_entries(tmp_path, monkeypatch, capsys):
    for index in range(10_000):  # runs with an event file but no tb-leak series
        RecordEventWriter(str(tmp_path / f"g{index // 100:03d}" / f"run{index:05d}")).close()
    write_run(str(tmp_path / "leaky"), leaky=True)
    write_run(str(tmp_path / "fixed"), leaky=False, seed=6)
    os.mkfifo(tmp_path / "leaky" / "events.out.tfevents.9999999999.fifo")
    os.mkfifo(tmp_path / "g000" / "events.out.tfevents.0.fifo")  # a "run" that is only a FIFO
    (tmp_path / "locked").mkdir()
    locked = str(tmp_path / "locked")
    real_scandir = os.scandir
    monkeypatch.setattr(loading.os, "scandir", lambda path=".": (
        (_ for _ in ()).throw(PermissionError(13, "Permission denied", locked))
        if os.fspath(path) == locked else real_scandir(path)))
    code, out, err = run_cli(capsys, "analyze", str(tmp_path), "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert len(data["runs"]) == 10_003
    assert data["runs"][0]["run"] == "leaky" and data["runs"][0]["verdict"] == "leak"
    assert any("not a regular file (a FIFO)" in w for w in data["runs"][0]["warnings"])
    assert any(locked in w and "Permission denied" in w for w in data["warnings"])


# ---------------------------------------------------- restarts, in the reader


def _two_attempts(run_dir: str):
    """A job that wrote steps 0-999, then restarted from its step-500 checkpoint
    and is now at 950, in a second event file that sorts after the first."""
    import time

    old = EventWriter(run_dir)
    for step in range(1000):
        old.write(step, [(RSS, 1e8 + step)], wall_time=1_700_000_000 + step)
    old.close()
    second = int(time.time())
    while int(time.time()) == second:  # file names start with the second: the new one sorts after
        time.sleep(0.02)
    new = EventWriter(run_dir)
    for step in range(500, 951):
        new.write(step, [(RSS, 2e8 + step)], wall_time=1_700_010_000 + step)
    new.close()
    names = sorted(n for n in os.listdir(run_dir) if "tfevents" in n)
    assert [os.path.join(run_dir, n) for n in names] == [old._writer.path, new._writer.path]


def test_a_restarted_job_drops_the_dead_attempts_later_steps(tmp_path):
    _two_attempts(str(tmp_path / "job"))
    series = loading.load_run("job", str(tmp_path / "job")).series[RSS.tag]
    assert list(series.steps) == list(range(951))
    assert np.all(series.values[:500] < 1.5e8) and np.all(series.values[500:] > 1.5e8)


def test_orphan_rule_by_file_order():
    steps = np.array([0, 1, 2, 3, 4, 2, 3, 7, 1, 9])
    files = np.array([0, 0, 0, 0, 0, 1, 1, 1, 2, 2])
    # File 2 restarts at 1: file 0's steps >= 1 and all of file 1 are orphaned.
    assert loading.not_orphaned(steps, files).tolist() == [True] + [False] * 7 + [True, True]
    # Within one file nothing is dropped (a repeated step's last write wins later).
    assert loading.not_orphaned(np.array([0, 2, 1, 3]), np.zeros(4, int)).all()


def test_plugin_applies_the_same_rule_to_the_providers_stream():
    from tb_leak_plugin.plugin.cache import latest_attempt

    # The multiplexer hands over file order: old 0..4, then the restart at 2.
    steps = np.array([0, 1, 2, 3, 4, 2, 3])
    assert latest_attempt(steps).tolist() == [True, True, False, False, False, True, True]
    assert latest_attempt(np.arange(5)).all() and latest_attempt(np.array([], dtype=np.int64)).size == 0


# ------------------------------------------------ profiler paths stay relative


def test_ops_and_report_routes_expose_no_absolute_path(tmp_path):
    logdir = tmp_path / "logs"
    write_run(str(logdir / "traced"), leaky=True)
    session = logdir / "traced" / "plugins" / "profile" / "2026_01_01_00_00_00"
    session.mkdir(parents=True)
    (session / "host.xplane.pb").write_bytes(b"\x0a\x03not a trace")
    client, _ = cp.plugin_client(str(logdir))
    absolute = {str(logdir), os.path.realpath(str(logdir)), str(tmp_path)}
    for route in ("ops", "report"):
        response = client.get(f"/data/plugin/leak/{route}", query_string={"run": "traced"})
        assert response.status_code == 200, response.get_data(as_text=True)
        body = response.get_data(as_text=True)
        assert not [path for path in absolute if path in body], body[:2000]
    ops = json.loads(client.get("/data/plugin/leak/ops", query_string={"run": "traced"}).get_data(as_text=True))
    (shown,) = ops["sessions"]
    assert shown["path"] == "plugins/profile/2026_01_01_00_00_00/host.xplane.pb"
    assert shown["error"] and shown["error"].startswith("plugins/profile/2026_01_01_00_00_00/host.xplane.pb")
