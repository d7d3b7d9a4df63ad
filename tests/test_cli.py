"""`tb-leak analyze`: formats, exit codes, bad input; the report behind them.

Logdirs are written with the TF-free EventWriter from seeded synthetic
series, so these tests need no TensorFlow and run in seconds.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tb_leak_plugin.reporting import cli
from tb_leak_plugin.eventfile import reader as loading
from tb_leak_plugin.analysis import census, report as report_lib
from tb_leak_plugin.metadata import SeriesInfo
from tb_leak_plugin.summary import EventWriter

RSS = SeriesInfo("process", "rss_bytes", "bytes")
AVAILABLE = SeriesInfo("process", "available_bytes", "bytes")
BLOCKS = SeriesInfo("python", "allocated_blocks", "blocks")
EAGER = SeriesInfo("tensors", "eager_count", "count")
TENSOR_TYPE = SeriesInfo("objects", "live_count", "count", "tensorflow.python.framework.ops.EagerTensor")
DICT_TYPE = SeriesInfo("objects", "live_count", "count", "builtins.dict")
TRACES = SeriesInfo("tf_function", "traces", "traces", "train_step")


def write_run(run_dir, leaky, steps=400, seed=0, retrace=False, census_every=5):
    rng = np.random.default_rng(seed)
    writer = EventWriter(run_dir)
    noise = np.cumsum(rng.normal(0, 20_000, steps)) * 0.1 + rng.normal(0, 50_000, steps)
    for step in range(steps):
        rss = 500e6 + noise[step] + (300_000 * step if leaky else 0)
        sample = [(RSS, rss), (AVAILABLE, 8e9 - rss), (BLOCKS, 1.2e6 + rng.normal(0, 30))]
        if step % census_every == 0:
            sample += [
                (EAGER, 10 + (step if leaky else 0)),
                (TENSOR_TYPE, 12 + (step if leaky else 0)),
                (DICT_TYPE, 30_000 + int(rng.integers(-3, 4))),
                (TRACES, 1 + (step if retrace else 0)),
            ]
        writer.write(step, sample, wall_time=1_700_000_000 + 0.5 * step)
    writer.close()


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("logdir")
    write_run(str(root / "job" / "leaky"), leaky=True)
    write_run(str(root / "job" / "fixed"), leaky=False, seed=1)
    write_run(str(root / "retrace"), leaky=False, seed=2, retrace=True)
    return str(root)


def run_cli(capsys, *args):
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_report_shape_and_verdicts(logdir, capsys):
    code, out, _err = run_cli(capsys, "analyze", logdir, "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["logdir"] == logdir
    runs = {run["run"]: run for run in data["runs"]}
    assert set(runs) == {"job/leaky", "job/fixed", "retrace"}
    leaky = runs["job/leaky"]
    assert leaky["verdict"] == "leak" and leaky["confidence"] >= 0.9
    for key in ("run", "verdict", "confidence", "growth_bytes_per_step", "series", "culprits", "hints"):
        assert key in leaky
    # Growth per step is estimated near the true 300 kB/step.
    assert 250_000 < leaky["growth_bytes_per_step"] < 350_000
    rss = next(s for s in leaky["series"] if s["tag"] == "leak/process/rss_bytes")
    for key in ("tag", "verdict", "slope_per_step", "slope_ci", "unit", "samples"):
        assert key in rss
    assert rss["unit"] == "bytes" and rss["samples"] == 400
    # The interval covers the true slope (to within 1% for this seed's draw).
    assert rss["slope_ci"][0] <= 303_000 and rss["slope_ci"][1] >= 297_000
    assert rss["seconds_to_exhaustion"] is not None
    top = leaky["culprits"][0]
    assert set(top) >= {"kind", "name", "growth_per_step", "evidence"}
    assert "EagerTensor" in top["name"]
    assert any(h["key"] == "tensors_kept" for h in leaky["hints"])
    # The noisy but flat run is not called a leak; the dict count wobbling
    # by a few objects is not a culprit.
    assert runs["job/fixed"]["verdict"] != "leak"
    assert not [c for c in leaky["culprits"] if c["name"] == "builtins.dict"]
    retrace = runs["retrace"]
    assert retrace["verdict"] == "leak"
    assert retrace["culprits"][0]["kind"] == "retracing" and retrace["culprits"][0]["name"] == "train_step"
    # Runs are listed leaks first; workers of one job are grouped.
    assert data["runs"][-1]["run"] == "job/fixed"
    assert data["groups"] == [{"parent": "job", "runs": ["job/fixed", "job/leaky"], "leaking": ["job/leaky"]}]


def test_text_and_markdown_formats(logdir, capsys):
    code, text, _ = run_cli(capsys, "analyze", logdir)
    assert code == 0
    assert "== run job/leaky: LEAK" in text and "KiB" in text
    assert "fix:" in text
    code, markdown, _ = run_cli(capsys, "analyze", logdir, "--format", "markdown")
    assert code == 0
    assert markdown.startswith("## tb-leak report")
    assert "| job/leaky | 🔴 LEAK |" in markdown


def test_fail_on_leak_and_run_filter(logdir, capsys):
    assert run_cli(capsys, "analyze", logdir, "--fail-on-leak")[0] == 1
    code, out, _ = run_cli(capsys, "analyze", logdir, "--fail-on-leak", "--run", "fixed$", "--format", "json")
    assert code == 0
    assert [r["run"] for r in json.loads(out)["runs"]] == ["job/fixed"]


@pytest.mark.parametrize("args, message", [
    (["analyze", "/nonexistent/logdir"], "does not exist"),
    (["analyze", "LOGDIR", "--run", "("], "not a valid regular expression"),
    (["analyze", "LOGDIR", "--format", "xml"], "invalid choice"),
    (["analyze"], "required"),
    (["analyze", "LOGDIR", "--jobs", "0"], "--jobs must be at least 1"),
    (["analyze", "LOGDIR", "--max-trace-mib", "-1"], "--max-trace-mib must be positive"),
    (["analyze", "LOGDIR", "--max-trace-mib", "nan"], "--max-trace-mib must be positive"),
    (["analyze", "LOGDIR", "--max-trace-mib", "inf"], "--max-trace-mib must be positive"),
    ([], "a command is required"),
])
def test_bad_usage_exits_2_with_one_line_error(args, message, logdir, capsys):
    args = [logdir if a == "LOGDIR" else a for a in args]
    code, out, err = run_cli(capsys, *args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err


def test_file_instead_of_logdir(tmp_path, capsys):
    path = tmp_path / "events.txt"
    path.write_text("not a logdir")
    code, _out, err = run_cli(capsys, "analyze", str(path))
    assert code == 2 and str(path) in err and "not a directory" in err


def test_empty_logdir_explains_how_to_write_summaries(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "analyze", str(tmp_path))
    assert code == 0
    assert "no event files" in out and "Monitor" in out


def test_bad_runs_do_not_stop_the_report(tmp_path, capsys):
    write_run(str(tmp_path / "good"), leaky=True)
    # A run with one sample, one with non-finite values, one corrupt file.
    one = EventWriter(str(tmp_path / "one_sample"))
    one.write(0, [(RSS, 1e8)])
    one.close()
    nonfinite = EventWriter(str(tmp_path / "nonfinite"))
    for step in range(100):
        nonfinite.write(step, [(RSS, float("nan") if step % 3 else 1e8 + step)])
    nonfinite.close()
    corrupt_dir = tmp_path / "corrupt"
    corrupt_dir.mkdir()
    (corrupt_dir / "events.out.tfevents.0.host").write_bytes(b"\x00garbage" * 100)
    code, out, err = run_cli(capsys, "analyze", str(tmp_path), "--format", "json")
    assert code == 0, err
    runs = {r["run"]: r for r in json.loads(out)["runs"]}
    assert runs["good"]["verdict"] == "leak"
    assert runs["one_sample"]["verdict"] == "inconclusive"
    assert runs["nonfinite"]["verdict"] != "leak"
    assert runs["corrupt"]["warnings"] and runs["corrupt"]["verdict"] == "inconclusive"


def test_writing_and_analysing_never_import_tensorflow(tmp_path):
    script = (
        "import sys; from tb_leak_plugin import summary, metadata; from tb_leak_plugin.reporting import cli;"
        f"w = summary.EventWriter({str(tmp_path / 'run')!r});"
        "[w.write(s, [(metadata.SeriesInfo('process','rss_bytes','bytes'), 1e8 + s)]) for s in range(50)];"
        "w.close();"
        f"code = cli.main(['analyze', {str(tmp_path)!r}, '--format', 'json']);"
        "assert 'tensorflow' not in sys.modules, 'imported tensorflow';"
        "print('EXIT', code)"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "EXIT 0" in result.stdout, result.stderr[-2000:]


def test_module_entry_point_and_no_tensorflow_import(logdir):
    script = (
        "import sys, runpy;"
        f"sys.argv=['tb-leak','analyze',{logdir!r},'--format','json'];"
        "import tb_leak_plugin.reporting.cli as c; code=c.main(sys.argv[1:]);"
        "assert 'tensorflow' not in sys.modules, 'imported tensorflow';"
        "print('EXIT', code)"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                            cwd=os.getcwd())
    assert "EXIT 0" in result.stdout, result.stderr[-2000:]
    result = subprocess.run([sys.executable, "-m", "tb_leak_plugin", "analyze", logdir, "--fail-on-leak"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "LEAK" in result.stdout


def test_benjamini_hochberg():
    p = [0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205]
    assert list(census.benjamini_hochberg(p, 0.05)) == [True, True, False, False, False, False, False, False]
    assert list(census.benjamini_hochberg([float("nan"), 0.5], 0.05)) == [False, False]
    assert census.benjamini_hochberg([], 0.05).size == 0


def test_materiality_keeps_tiny_heap_growth_from_being_a_leak(tmp_path):
    writer = EventWriter(str(tmp_path / "run"))
    for step in range(400):
        # +1 block per step on a 1.2M-block heap: a list of floats, real but tiny.
        writer.write(step, [(BLOCKS, 1.2e6 + step), (RSS, 5e8)])
    writer.close()
    run = loading.load_run("run", str(tmp_path / "run"))
    result = report_lib.build_run_report(run)
    blocks = next(s for s in result.series if s.tag == "leak/python/allocated_blocks")
    assert blocks.verdict == "no_leak" and "no leak above" in blocks.trend.reason
    assert result.verdict == "no_leak"


def test_parallel_workers_give_the_same_report(logdir):
    from tb_leak_plugin.reporting import logdir as analyze

    serial = analyze.analyze_logdir(logdir, jobs=1).to_dict()
    parallel = analyze.analyze_logdir(logdir, jobs=2).to_dict()
    assert json.dumps(parallel, sort_keys=True) == json.dumps(serial, sort_keys=True)


def test_markdown_makes_hostile_names_inert():
    report = {"logdir": "/tmp/`x`", "warnings": [], "runs": [{
        "run": "a|b\n# heading", "verdict": "leak", "confidence": 1.0, "reason": "r",
        "growth_bytes_per_step": 1.0, "culprits": [{
            "kind": "object_type", "name": "x` ![img](http://e/x.png) `", "growth_per_step": 1.0,
            "unit": "objects", "evidence": "e", "confidence": 1.0, "hint": None}], "hints": []}]}
    markdown = cli.format_markdown(report)
    assert "![img]" not in markdown and "\\!\\[img\\]" in markdown
    assert "\n# heading" not in markdown
    table_rows = [line for line in markdown.splitlines() if line.startswith("| a")]
    assert len(table_rows) == 1 and "a\\|b" in table_rows[0]
