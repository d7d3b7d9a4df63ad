"""Logdirs on S3, end to end, against a real S3-compatible server on 127.0.0.1.

A moto server (``moto[server]``, its own process) stands in for S3. A real
``Monitor`` writes there (a plain Python loop in this process, a small
TensorFlow loop in a subprocess), the real CLI (``python -m tb_leak_plugin
analyze s3://...``, a subprocess) reads the verdicts, and a real TensorBoard
process serves the Leak tab from ``--logdir s3://...``: through ``tb-leak
tensorboard`` (TensorBoard's main with its TensorFlow-free I/O layer: TF 2.21
itself has no s3 filesystem) and through plain ``tensorboard`` in a process
where TensorFlow cannot be imported (as in an environment without it).
Credentials and the endpoint reach every process the way TensorBoard and
boto3 read them (``AWS_*`` variables, ``S3_ENDPOINT`` / ``AWS_ENDPOINT_URL``).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.parse
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from s3_server import S3Server, free_port  # noqa: E402
from xspace_builder import leaky_trace_bytes  # noqa: E402

pytest.importorskip("boto3")
pytest.importorskip("moto.server")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = "tb-leak-test"
LOGS = f"s3://{BUCKET}/logs"
SEGMENT_BYTES = 16 << 10  # small segments, so a short run writes several

TF_LOOP = textwrap.dedent("""
    import sys
    import tensorflow as tf
    import tb_leak_plugin as tbleak

    kept = []
    with tbleak.Monitor(sys.argv[1], flush_secs=0.5) as monitor:
        for step in range(400):
            x = tf.random.normal([256, 256])
            kept.append(tf.matmul(x, x))  # 256 KiB a step, kept alive
            monitor.sample(step)
""")


def _env(s3, **extra):
    env = s3.env()
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.update(extra)
    return env


def _cli(s3, *args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "tb_leak_plugin", "analyze", *args], capture_output=True,
                          text=True, env=env or _env(s3), timeout=timeout)


def _plain_loop(logdir: str, keep: bool, steps: int = 300):
    """A 0.3-s loop on a simulated clock whose costs read as zero: the
    schedule alone decides how many points are taken (a loaded machine
    cannot thin them). Uploads still run on real time (flush_secs)."""
    import tb_leak_plugin as tbleak
    from tb_leak_plugin.capture import clock

    kept = []
    with clock.use(clock.SimulatedClock(real_costs=False)) as sim:
        monitor = tbleak.Monitor(logdir, flush_secs=0.2, probes=("process", "python", "malloc", "gc", "objects"))
        for step in range(steps):
            block = bytearray(64 << 10)
            if keep:
                kept.append(block)
            sim.advance(0.001)
            monitor.sample(step)
            time.sleep(0.001)  # real time too, so the uploader's flushes interleave with the loop
        writer = monitor._writer.record_writer
        monitor.close()
    return writer


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        server.client().create_bucket(Bucket=BUCKET)
        yield server


@pytest.fixture(scope="module")
def logs(s3):
    """Three runs under s3://tb-leak-test/logs: plain/leaky, plain/clean, tf/leaky.

    plain/leaky also has profiler traces on the store: a session whose trace
    keeps ``leaky/MatMul``'s outputs, and one whose trace is cut short."""
    from tb_leak_plugin.eventfile import writer as writer_lib

    with pytest.MonkeyPatch.context() as patch:
        for key, value in s3.env(base={}, s3_endpoint=False).items():
            patch.setenv(key, value)  # in process: boto3 reads AWS_ENDPOINT_URL
        patch.setattr(writer_lib, "SEGMENT_BYTES", SEGMENT_BYTES)
        writers = {"plain/leaky": _plain_loop(f"{LOGS}/plain/leaky", keep=True),
                   "plain/clean": _plain_loop(f"{LOGS}/plain/clean", keep=False)}
    done = subprocess.run([sys.executable, "-c", TF_LOOP, f"{LOGS}/tf/leaky"], env=_env(s3),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    trace = leaky_trace_bytes()
    profile = "logs/plain/leaky/plugins/profile"
    s3.client().put_object(Bucket=BUCKET, Key=f"{profile}/2026_01_01_00_00_00/host_a.xplane.pb", Body=trace)
    s3.client().put_object(Bucket=BUCKET, Key=f"{profile}/2026_01_02_00_00_00/host_a.xplane.pb",
                           Body=trace[:len(trace) // 2])
    return writers


def test_monitor_writes_whole_segments_in_order(s3, logs):
    from tb_leak_plugin.eventfile import reader

    writer = logs["plain/leaky"]
    keys = s3.keys(BUCKET, "logs/plain/leaky/")
    events = [k for k in keys if "tfevents" in k]
    assert len(events) == writer.segments >= 3, keys
    assert events == sorted(events) and events[-1].endswith(".s%06d.tbleak" % (writer.segments - 1))
    # Each put is bounded by a segment plus one batch of records.
    assert writer.uploads >= writer.segments and writer.failed_flushes == 0 and writer.dropped_records == 0
    assert writer.uploaded_bytes / writer.uploads < 2 * SEGMENT_BYTES
    # Every object is a complete event file: a version record first, no torn record.
    with tempfile.TemporaryDirectory() as tmp:
        for key in events:
            path = os.path.join(tmp, os.path.basename(key))
            s3.client().download_file(BUCKET, key, path)
            warnings = []
            records = list(reader.iter_records(path, warnings))
            assert not warnings and records and os.path.getsize(path) <= SEGMENT_BYTES + 4096
            assert b"brain.Event:2" in records[0]


@pytest.fixture(scope="module")
def cli_report(s3, logs):
    """``tb-leak analyze s3://tb-leak-test/logs --format json``, read once."""
    done = _cli(s3, LOGS, "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _verdicts(report):
    return {run["run"]: run["verdict"] for run in report["runs"]}


def test_cli_reads_verdicts_from_s3_like_from_disk(s3, cli_report, tmp_path):
    report = cli_report
    verdicts = _verdicts(report)
    assert verdicts["plain/leaky"] == "leak", report
    assert verdicts["plain/clean"] != "leak", report
    assert verdicts["tf/leaky"] == "leak", report
    leaky = next(r for r in report["runs"] if r["run"] == "plain/leaky")
    # (Its points are taken on a simulated clock: the schedule alone decides
    # how many; every one written is read, which the equality with disk shows.)
    assert not leaky["warnings"] and leaky["samples"] >= 30
    # Its traces, read from the store: one analysed, the cut one named (relative to the run).
    good, cut = leaky["traces"]["sessions"]
    assert good["error"] is None and good["path"] == "plugins/profile/2026_01_01_00_00_00/host_a.xplane.pb"
    assert [op["op"] for op in good["suspicious"]] == ["leaky/MatMul"]
    assert "truncated" in cut["error"] and "plugins/profile/2026_01_02_00_00_00/host_a.xplane.pb" in cut["error"]
    assert "s3://" not in json.dumps(leaky["traces"])
    assert any(c["kind"] == "op" and c["name"] == "leaky/MatMul" for c in leaky["culprits"])

    # The bucket's root (which TensorBoard's own S3 paths cannot name), with worker processes.
    done = _cli(s3, f"s3://{BUCKET}", "--format", "json", "--jobs", "2")
    assert done.returncode == 0, done.stderr
    assert _verdicts(json.loads(done.stdout)) == {f"logs/{run}": v for run, v in verdicts.items()}

    # The same objects copied to a local logdir give the same report.
    client = s3.client()
    for key in s3.keys(BUCKET, "logs/"):
        if key.endswith("/"):
            continue
        path = tmp_path / key
        path.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(BUCKET, key, str(path))
    local = json.loads(_cli(s3, str(tmp_path / "logs"), "--format", "json").stdout)
    for remote_run, local_run in zip(report["runs"], local["runs"]):
        for field in ("run", "verdict", "samples", "growth_bytes_per_step", "primary_tag"):
            assert remote_run[field] == local_run[field], field


TENSORBOARD_COMMANDS = {
    # TensorBoard's main with its TensorFlow-free gfile, even though TF is installed here.
    "tb-leak tensorboard": [sys.executable, "-m", "tb_leak_plugin", "tensorboard"],
    # The `tensorboard` command where TensorFlow cannot be imported.
    "tensorboard without TensorFlow": [
        sys.executable, "-c",
        "import sys; sys.modules['tensorflow'] = None; sys.argv[0] = 'tensorboard'; "
        "from tensorboard.main import run_main; sys.exit(run_main())"],
}


def test_tensorboard_serves_the_leak_tab_from_s3(s3, cli_report):
    """Both ways of running TensorBoard on s3://, side by side (they start in parallel)."""
    # Only boto3's variable this time: the endpoint reaches TensorBoard's S3 client through boto3.
    env = _env(s3)
    env.pop("S3_ENDPOINT")
    boards = []
    try:
        for name, command in sorted(TENSORBOARD_COMMANDS.items()):
            port = free_port()
            log = tempfile.TemporaryFile()
            process = subprocess.Popen(
                [*command, "--logdir", LOGS, "--host", "127.0.0.1", "--port", str(port), "--reload_interval", "2"],
                stdout=log, stderr=subprocess.STDOUT, env=env)
            boards.append((name, f"http://127.0.0.1:{port}", process, log))
        for name, url, process, log in boards:
            runs = _wait_for_runs(url, process, log, count=3)
            assert {row["run"]: row["verdict"] for row in runs} == _verdicts(cli_report), name
            run = urllib.parse.quote("plain/leaky")
            report = _get(url, f"/data/plugin/leak/report?run={run}")
            assert report["verdict"] == "leak" and report["samples"] >= 30, name
            tag = urllib.parse.quote(report["primary_tag"])
            timeline = _get(url, f"/data/plugin/leak/timeline?run={run}&tag={tag}")
            # Every point the CLI read for that series (however many the
            # schedule took in this run), not a fixed count.
            cli_run = next(r for r in cli_report["runs"] if r["run"] == "plain/leaky")
            read = next(s["samples"] for s in cli_run["series"] if s["tag"] == report["primary_tag"])
            assert timeline["verdict"] == "leak" and len(timeline["points"]["x"]) == read >= 30, name
            ops = _get(url, f"/data/plugin/leak/ops?run={run}")
            assert ops["has_traces"] and [op["op"] for op in ops["ops"]] == ["leaky/MatMul"], name
            assert [s["error"] is None for s in ops["sessions"]] == [True, False], name
    finally:
        for _name, _url, process, log in boards:
            process.terminate()
        for _name, _url, process, log in boards:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


def _get(url, path):
    with urllib.request.urlopen(url + path, timeout=60) as response:
        return json.loads(response.read())


def _wait_for_runs(url, process, log, count, timeout=120):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise AssertionError(f"tensorboard exited {process.returncode}: {log.read()[-3000:]!r}")
        try:
            runs = _get(url, "/data/plugin/leak/runs")["runs"]
            if len(runs) >= count:
                return runs
            last = runs
        except Exception as error:
            last = error
        time.sleep(0.5)
    log.seek(0)
    raise AssertionError(f"no {count} leak runs after {timeout} s ({last}): {log.read()[-3000:]!r}")


def _one_line_error(done):
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tb-leak: error: "), done.stderr
    return lines[0]


def test_missing_bucket_prefix_and_unreachable_endpoint_are_one_line_errors(s3):
    assert "NoSuchBucket" in _one_line_error(_cli(s3, "s3://no-such-bucket/logs"))
    assert "does not exist" in _one_line_error(_cli(s3, f"s3://{BUCKET}/no-such-prefix"))
    closed = f"http://127.0.0.1:{free_port()}"
    started = time.time()
    line = _one_line_error(_cli(s3, LOGS, env=_env(s3, S3_ENDPOINT=closed, AWS_ENDPOINT_URL=closed,
                                                   AWS_MAX_ATTEMPTS="2")))
    assert "Could not connect" in line and "S3_ENDPOINT" in line
    assert time.time() - started < 60


def test_truncated_remote_event_file_is_reported_and_nothing_else_lost(s3, cli_report):
    client = s3.client()
    for run, copy in (("plain/leaky", "damaged/cut"), ("plain/clean", "damaged/intact")):
        keys = [k for k in s3.keys(BUCKET, f"logs/{run}/") if "tfevents" in k]
        for key in keys:
            body = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
            if copy == "damaged/cut" and key == keys[len(keys) // 2]:
                cut_name, body = os.path.basename(key), body[:len(body) - 7]  # the last record loses its tail
            client.put_object(Bucket=BUCKET, Key=f"damaged/{copy.split('/')[1]}/{os.path.basename(key)}", Body=body)
    report = json.loads(_cli(s3, f"s3://{BUCKET}/damaged", "--format", "json").stdout)
    runs = {run["run"]: run for run in report["runs"]}
    cut, intact = runs["cut"], runs["intact"]
    assert any(cut_name in w and "ends inside a record" in w for w in cut["warnings"]), cut["warnings"]
    original = {run["run"]: run for run in cli_report["runs"]}
    # One record lost from the cut run, and only that: later segments are still read.
    assert original["plain/leaky"]["samples"] - 1 <= cut["samples"] <= original["plain/leaky"]["samples"]
    assert cut["verdict"] == "leak"
    assert not intact["warnings"] and intact["verdict"] == original["plain/clean"]["verdict"]
    assert intact["samples"] == original["plain/clean"]["samples"]


def test_store_down_never_hurts_the_loop_and_backlog_uploads_when_it_returns(monkeypatch, caplog):
    """The endpoint is down while the loop runs: sample() stays fast and never
    raises, one warning is logged, memory stays bounded (records past the
    backlog limit are dropped and counted); the store comes back before
    close(), and close() uploads what was kept."""
    import tb_leak_plugin as tbleak
    from tb_leak_plugin.eventfile import writer as writer_lib
    from tb_leak_plugin.reporting import logdir as analyze

    port = free_port()
    future = S3Server(port)
    for key, value in future.env(base={}, s3_endpoint=False).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setattr(writer_lib, "MAX_PENDING_BYTES", 96 << 10)
    caplog.set_level(logging.WARNING, logger="tb_leak_plugin")
    monitor = tbleak.Monitor(f"s3://{BUCKET}/down/run", flush_secs=0.05, overhead_budget=None,
                             probes=("process", "python", "malloc", "gc"))
    writer = monitor._writer.record_writer
    slowest = 0.0
    for step in range(400):
        started = time.perf_counter()
        monitor.sample(step)
        slowest = max(slowest, time.perf_counter() - started)
        time.sleep(0.002)
    time.sleep(0.3)
    assert writer.failed_flushes >= 1 and writer.dropped_records > 0
    assert writer._pending.nbytes <= writer_lib.MAX_PENDING_BYTES
    assert slowest < 0.5, slowest  # no sample waited for the network
    failures = [r for r in caplog.records if "uploading summaries" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in caplog.records]
    assert not monitor._stopped  # sampling goes on while the store is down

    with future as s3:
        s3.client().create_bucket(Bucket=BUCKET)
        started = time.time()
        monitor.close()
        assert time.time() - started < writer_lib.CLOSE_TIMEOUT_S + 5
        assert not writer._pending and writer.uploads >= 1
        report = analyze.analyze_logdir(f"s3://{BUCKET}/down")
        (run,) = report.runs
        assert run.run == "run" and run.samples > 20
    assert any("samples were dropped" in r.getMessage() for r in caplog.records)


def test_segments_read_back_whole_through_fsspec_and_failed_puts_lose_nothing():
    """Without a server: fsspec's in-memory filesystem (``memory://``, reached
    through TensorBoard's gfile like gcsfs or s3fs would be) holds the segments."""
    from tb_leak_plugin.eventfile import reader
    from tb_leak_plugin.metadata import SeriesInfo
    from tb_leak_plugin.summary import EventWriter

    info = SeriesInfo("process", "rss_bytes", "bytes")
    writer = EventWriter("memory://tbleak/logs/run", flush_secs=1e9)
    segments = writer.record_writer
    segments._segment_bytes = 2048
    put = segments._fs.write
    for step in range(300):
        writer.write(step, [(info, 1e6 + step)], wall_time=1.7e9 + step)
        if step == 150:
            def refuse(*args, **kwargs):
                raise OSError("store unavailable")
            segments._fs.write = refuse
            with pytest.raises(OSError, match="store unavailable"):
                writer.flush()
            assert segments._pending and segments.failed_flushes == 1
            segments._fs.write = put
        if step % 10 == 9:
            writer.flush()
    writer.close()
    assert segments.segments >= 5 and not segments._pending and segments.dropped_records == 0
    data = reader.load_logdir("memory://tbleak/logs")
    (run,) = data.runs
    series = run.series[info.tag]
    assert run.name == "run" and not run.warnings
    assert series.steps.tolist() == list(range(300)) and series.values[-1] == 1e6 + 299


def test_remote_path_helpers_keep_roots_and_absolute_paths():
    from tb_leak_plugin.eventfile import remote

    assert remote.normalize("s3://bucket/") == "s3://bucket"
    assert remote.join("s3://bucket", "logs/", "run") == "s3://bucket/logs/run"
    assert remote.bucket_and_key("s3://bucket/a/b/") == ("bucket", "a/b")
    assert remote.normalize("file:///tmp/logs/") == "file:///tmp/logs"  # still absolute
    assert remote.join("file:///", "tmp") == "file:///tmp"
