"""Multi-worker training: one run per task of a tf.distribute job, grouped as a job.

The real jobs run on localhost: a two-worker ``MultiWorkerMirroredStrategy``
custom loop (two processes, each with its own ``TF_CONFIG`` and port; worker 1
keeps a 256 KiB tensor per step, worker 0 does not), and a chief + worker
``model.fit`` with ``LeakCallback`` (tf_keras: Keras 3's ``model.fit`` does not
run under MultiWorkerMirroredStrategy in TF 2.21), and a ParameterServerStrategy
job (chief, worker, parameter server) whose chief alone runs the loop. All at
default Monitor settings, each job's tasks writing to one logdir. Then: separate runs, identities
recorded, ``tb-leak analyze`` groups them, names the leaking worker and counts
the job once for ``--fail-on-leak``; the Leak tab lists the job and draws its
tasks in one chart. The rest are fast checks of TF_CONFIG handling, run
naming, file naming and the job patterns.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from tb_leak_plugin import metadata
from tb_leak_plugin.analysis import jobs
from tb_leak_plugin.capture import cluster
from tb_leak_plugin.eventfile import reader, writer as writer_lib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest_plugin as cp  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOB_TIMEOUT_S = 180


def _env(**extra) -> dict:
    """The environment of a task: the package under test first on the path."""
    path = os.pathsep.join([REPO] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=path, **extra)


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for sock in sockets:
            sock.bind(("localhost", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _run_job(script: str, tasks: list[tuple[str, int]], cluster_spec: dict, args: list[str], tmp, extra_env=None,
             wait_for=None):
    """Start one process per task with its TF_CONFIG; wait for all (or the
    ``wait_for`` tasks: servers never exit), bounded; kill every one that is
    left in any case. Returns their outputs."""
    path = tmp / "task.py"
    path.write_text(textwrap.dedent(script))
    procs, logs = [], []
    try:
        for task_type, index in tasks:
            config = {"cluster": cluster_spec, "task": {"type": task_type, "index": index}}
            log = open(tmp / f"{task_type}-{index}.log", "w+")
            logs.append(log)
            procs.append(subprocess.Popen([sys.executable, str(path), *args], stdout=log, stderr=subprocess.STDOUT,
                                          env=_env(TF_CONFIG=json.dumps(config), **(extra_env or {})), cwd=str(tmp)))
        deadline = time.monotonic() + JOB_TIMEOUT_S
        for task, proc in zip(tasks, procs):
            if wait_for is None or task in wait_for:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read()[-4000:])
        log.close()
    for (task_type, index), proc, output in zip(tasks, procs, outputs):
        if wait_for is None or (task_type, index) in wait_for:
            assert proc.returncode == 0, f"{task_type}-{index} exited with {proc.returncode}:\n{output}"
    return outputs


_MWMS_LOOP = """
    import os, sys, time
    import tensorflow as tf
    import tb_leak_plugin as tbleak

    logdir, steps = sys.argv[1], int(sys.argv[2])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    resolver = strategy.cluster_resolver
    leaks = resolver.task_id == 1          # worker 1 leaks, worker 0 does not
    with strategy.scope():
        w = tf.Variable(tf.random.normal([64, 64], seed=1))

    @tf.function
    def train_step(x):
        def replica_step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.matmul(x, w) ** 2)
            grad = tf.distribute.get_replica_context().all_reduce("mean", tape.gradient(loss, w))
            w.assign_sub(1e-3 * grad)
            return loss
        return strategy.run(replica_step, args=(x,))

    x = tf.random.normal([32, 64])
    kept = []
    monitor = tbleak.Monitor(logdir)       # default settings; one logdir for both tasks
    for step in range(steps):
        train_step(x)
        if leaks:
            kept.append(tf.random.normal([256, 256]))   # the leak: 256 KiB a step, kept forever
        time.sleep(0.004)
        monitor.sample(step)
    monitor.close()
    print("run", monitor.logdir, "task", monitor.task, flush=True)
"""

_FIT = """
    import os, sys, time
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras
    from tb_leak_plugin.keras import LeakCallback

    logdir = sys.argv[1]
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.layers.Dense(32, activation="relu", input_shape=(16,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
    rng = np.random.default_rng(0)
    data = tf.data.Dataset.from_tensor_slices((rng.random((2400, 16), dtype=np.float32),
                                               rng.random((2400, 1), dtype=np.float32))).batch(16)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = data.with_options(options)

    class KeepPredictions(keras.callbacks.Callback):
        # The leak: every batch leaves a 256 KiB tensor behind, on every task.
        def __init__(self):
            super().__init__()
            self.kept = []

        def on_train_batch_end(self, batch, logs=None):
            self.kept.append(tf.random.normal([256, 256]))

    callback = LeakCallback(logdir)
    started = time.perf_counter()
    model.fit(data, epochs=1, verbose=0, callbacks=[KeepPredictions(), callback])
    print("steps", callback._step, "seconds", time.perf_counter() - started, flush=True)
"""


_PS_TASK = """
    import json, os, sys
    import tensorflow as tf

    config = json.loads(os.environ["TF_CONFIG"])
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if config["task"]["type"] in ("worker", "ps"):   # servers only: no training loop, no Monitor
        tf.distribute.Server(resolver.cluster_spec(), job_name=config["task"]["type"],
                             task_index=config["task"]["index"], protocol="grpc", start=True).join()
    import tb_leak_plugin as tbleak

    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        w = tf.Variable(tf.random.normal([64, 64]))

    @tf.function
    def train_step():
        loss = tf.reduce_mean(tf.matmul(tf.random.normal([32, 64]), w) ** 2)
        w.assign_sub(1e-4 * loss * tf.ones_like(w))
        return loss

    kept = []
    monitor = tbleak.Monitor(sys.argv[1])
    for step in range(int(sys.argv[2])):
        coordinator.schedule(train_step)
        coordinator.join()
        kept.append(tf.random.normal([256, 256]))   # the leak, in the coordinator's loop
        monitor.sample(step)
    monitor.close()
"""


@pytest.fixture(scope="module")
def mwms_logdir(tmp_path_factory):
    """A real two-worker MultiWorkerMirroredStrategy job on localhost."""
    tmp = tmp_path_factory.mktemp("mwms")
    logdir = tmp / "logs"
    ports = _free_ports(2)
    spec = {"worker": [f"localhost:{port}" for port in ports]}
    started = time.monotonic()
    outputs = _run_job(_MWMS_LOOP, [("worker", 0), ("worker", 1)], spec, [str(logdir / "exp1"), "300"], tmp)
    return {"logdir": str(logdir), "outputs": outputs, "seconds": time.monotonic() - started, "spec": spec}


def _analyze(logdir, *args):
    return subprocess.run([sys.executable, "-m", "tb_leak_plugin.reporting.cli", "analyze", logdir, *args],
                          capture_output=True, text=True, timeout=120, env=_env())


def test_two_workers_write_their_own_runs_with_identities(mwms_logdir):
    runs = reader.discover_runs(mwms_logdir["logdir"])
    assert sorted(runs) == ["exp1/worker-0", "exp1/worker-1"], (runs, mwms_logdir["outputs"])
    identities = {}
    for name, path in runs.items():
        files = reader.event_files(path)
        assert len(files) == 1 and files[0].endswith(name.split("/")[1] + ".tbleak"), files
        run = reader.load_run(name, path)
        identities[name] = jobs.take_task(run)
        assert metadata.TASK_TAG not in run.series and len(run.series) > 5
    assert identities["exp1/worker-1"]["task_type"] == "worker"
    assert [identities[f"exp1/worker-{i}"]["task_index"] for i in (0, 1)] == [0, 1]
    for identity in identities.values():
        assert identity["cluster_size"] == 2 and identity["task_counts"] == {"worker": 2}
        assert identity["host"] == socket.gethostname() and identity["pid"] > 0
        assert identity["run_named_by"] == "tf_config"
    assert identities["exp1/worker-0"]["cluster_id"] == identities["exp1/worker-1"]["cluster_id"]
    assert identities["exp1/worker-0"]["pid"] != identities["exp1/worker-1"]["pid"]


def test_analyze_groups_the_job_and_names_the_leaking_worker(mwms_logdir):
    logdir = mwms_logdir["logdir"]
    result = _analyze(logdir, "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    verdicts = {run["run"]: run["verdict"] for run in report["runs"]}
    assert verdicts["exp1/worker-1"] == "leak", (verdicts, result.stdout[-3000:])
    assert verdicts["exp1/worker-0"] != "leak", verdicts
    assert {run["run"]: run["task"]["task_index"] for run in report["runs"]} == {"exp1/worker-0": 0, "exp1/worker-1": 1}
    [job] = report["jobs"]
    assert job["job"] == "exp1" and job["verdict"] == "leak" and job["pattern"] == "one"
    assert job["leaking"] == ["worker-1"] and [t["task"] for t in job["tasks"]] == ["worker-0", "worker-1"]
    assert job["missing"] == [] and job["tag"]
    assert "worker-1 leaks" in job["summary"] and "data shard" in job["summary"]

    text = _analyze(logdir)
    assert "== job exp1: LEAK (2 tasks, cluster of 2)" in text.stdout
    assert "worker-1 leaks" in text.stdout and "one task leaks" in text.stdout

    failing = _analyze(logdir, "--fail-on-leak")
    assert failing.returncode == 1
    assert "1 leak found (a job counts once): job 'exp1' (worker-1 of 2 tasks)" in failing.stderr


def test_leak_tab_lists_the_job(mwms_logdir, plugin_client):
    client, _plugin = plugin_client(mwms_logdir["logdir"])
    body = json.loads(client.get("/data/plugin/leak/runs").get_data())
    rows = {row["run"]: row for row in body["runs"]}
    assert rows["exp1/worker-1"]["task"]["task_index"] == 1 and rows["exp1/worker-1"]["job"] == "exp1"
    [job] = body["jobs"]
    assert job["leaking"] == ["worker-1"] and job["runs"] == ["exp1/worker-0", "exp1/worker-1"]
    report = json.loads(client.get("/data/plugin/leak/report?run=exp1/worker-1").get_data())
    assert metadata.TASK_TAG not in {s["tag"] for s in report["series"]}
    assert report["task"]["task_type"] == "worker" and report["task"]["task_index"] == 1
    compare = json.loads(client.get(
        f"/data/plugin/leak/compare?run=exp1/worker-0&run=exp1/worker-1&tag={job['tag']}").get_data())
    assert [s["run"] for s in compare["series"]] == ["exp1/worker-0", "exp1/worker-1"]


class _TwoRunBoard(cp.TensorBoardProcess):
    """A real tensorboard, ready once it lists the job's two runs."""

    def wait_ready(self, timeout: float = 90.0, min_runs: int = 2, min_leak_runs: int = 2) -> None:
        super().wait_ready(timeout, min_runs, min_leak_runs)


def test_job_view_in_the_browser(mwms_logdir, chromium):
    """The Rust data server (--load_fast=true) carries the task identity too."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    with _TwoRunBoard(mwms_logdir["logdir"], load_fast=True) as board, \
            playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=cp.CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 1000})
            errors = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.goto(f"{board.url}/data/plugin_entry.html?name=leak")
            ready = "[data-testid=leak-app][data-state=ready]"
            page.wait_for_selector(ready, timeout=30_000)
            item = page.locator("[data-testid=job-item][data-job='exp1']")
            assert item.locator("[data-testid=verdict-badge]").inner_text() == "leak"
            item.click()
            page.wait_for_selector(ready, timeout=30_000)
            assert page.locator("[data-testid=job-title]").inner_text() == "Job exp1"
            assert "worker-1 leaks" in page.locator("[data-testid=job-advice]").inner_text()
            rows = page.locator("[data-testid=job-task]")
            assert rows.count() == 2
            assert page.locator("[data-testid=job-task][data-task='worker-1']").get_attribute("data-verdict") == "leak"
            chart = page.locator("[data-testid=job-chart-card] [data-testid=chart]")
            assert chart.locator("path[data-role=series]").count() == 2, "one line per task"
            legend = page.locator("[data-testid=job-chart-card] [data-testid=legend]").inner_text()
            assert "worker-0" in legend and "worker-1" in legend
            page.locator("[data-testid=job-task][data-task='worker-1'] [data-testid=job-task-run]").click()
            page.wait_for_selector(ready, timeout=30_000)
            assert page.locator("[data-testid=summary-run]").inner_text() == "exp1/worker-1"
            assert not errors, errors
        finally:
            browser.close()


def test_chief_and_worker_model_fit_with_leak_callback(tmp_path):
    pytest.importorskip("tf_keras", reason="multi-worker model.fit needs tf_keras (Keras 3's fit does not run "
                                           "under MultiWorkerMirroredStrategy); .ci/run installs it")
    logdir = tmp_path / "logs"
    ports = _free_ports(2)
    spec = {"chief": [f"localhost:{ports[0]}"], "worker": [f"localhost:{ports[1]}"]}
    outputs = _run_job(_FIT, [("chief", 0), ("worker", 0)], spec, [str(logdir)], tmp_path,
                       extra_env={"TF_USE_LEGACY_KERAS": "1"})
    runs = reader.discover_runs(str(logdir))
    assert sorted(runs) == ["chief-0", "worker-0"], (runs, outputs)
    result = _analyze(str(logdir), "--format", "json", "--fail-on-leak")
    report = json.loads(result.stdout)
    [job] = report["jobs"]
    assert job["job"] == "." and [t["task"] for t in job["tasks"]] == ["chief-0", "worker-0"]
    assert job["task_counts"] == {"chief": 1, "worker": 1}
    assert job["verdict"] == "leak" and job["pattern"] == "alike", job
    assert result.returncode == 1 and "1 leak found" in result.stderr


def test_parameter_server_job_watches_its_coordinator(tmp_path):
    """ParameterServerStrategy: the chief runs the loop for the workers; its
    run is the job's only one, and none is missing."""
    logdir = tmp_path / "logs"
    ports = _free_ports(3)
    spec = {"chief": [f"localhost:{ports[0]}"], "worker": [f"localhost:{ports[1]}"], "ps": [f"localhost:{ports[2]}"]}
    outputs = _run_job(_PS_TASK, [("ps", 0), ("worker", 0), ("chief", 0)], spec, [str(logdir), "300"], tmp_path,
                       wait_for=[("chief", 0)])
    assert list(reader.discover_runs(str(logdir))) == ["chief-0"], outputs
    report = json.loads(_analyze(str(logdir), "--format", "json", "--no-traces").stdout)
    [job] = report["jobs"]
    assert job["cluster_size"] == 3 and job["missing"] == [] and job["runs"] == ["chief-0"]
    assert job["verdict"] == "leak" and job["pattern"] == "coordinator", job
    assert "the training loop it runs for every worker" in job["summary"]


# -- fast checks: TF_CONFIG, run names, file names, job patterns ----------------------------


def _tf_config(task_type="worker", index=0, spec=None):
    return json.dumps({"cluster": spec or {"worker": ["a:1", "b:2"]}, "task": {"type": task_type, "index": index}})


def test_tf_config_parsing():
    task = cluster.parse_tf_config(_tf_config("worker", 1))
    assert (task.task_type, task.task_index, task.cluster_size, task.name, task.shared) == ("worker", 1, 2, "worker-1", True)
    assert cluster.current_task({}) is None and cluster.current_task({"TF_CONFIG": "  "}) is None
    assert cluster.parse_tf_config(json.dumps({"cluster": {"worker": ["a:1"]}})) is None  # a spec, no task
    sparse = cluster.parse_tf_config(json.dumps({"cluster": {"worker": {"3": "a:1"}}, "task": {"type": "worker", "index": 3}}))
    assert sparse.task_index == 3
    evaluator = cluster.parse_tf_config(json.dumps({"cluster": {"chief": ["a:1"]}, "task": {"type": "evaluator", "index": 0}}))
    assert evaluator.cluster_size == 2 and evaluator.shared
    single = cluster.parse_tf_config(json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}))
    assert not single.shared
    assert cluster.parse_tf_config(_tf_config(spec={"worker": ["a:1", "b:2"]})).cluster_id == \
        cluster.parse_tf_config(_tf_config(index=1, spec={"worker": ["a:1", "b:2"]})).cluster_id
    for bad in ("{not json", "[1]", json.dumps({"cluster": [], "task": {"type": "worker"}}),
                json.dumps({"cluster": {}, "task": {"index": 0}}), _tf_config(index=-1), _tf_config(index=True),
                _tf_config(index=5), json.dumps({"cluster": {"worker": 3}, "task": {"type": "worker", "index": 0}})):
        with pytest.raises(cluster.ClusterConfigError):
            cluster.parse_tf_config(bad)


def test_run_directories_and_hostile_task_types(tmp_path):
    logdir = str(tmp_path)
    env = {"TF_CONFIG": _tf_config("worker", 1)}
    assert cluster.resolve_run_dir(logdir, None, env).run_dir == os.path.join(logdir, "worker-1")
    assert cluster.resolve_run_dir(logdir, None, {}).run_dir == logdir
    assert cluster.resolve_run_dir(logdir, ".", env).run_dir == logdir
    named = cluster.resolve_run_dir(logdir, "exp/{task}", env)
    assert named.run_dir == os.path.join(logdir, "exp", "worker-1") and named.identity["run_named_by"] == "user"
    assert named.notice is None
    assert cluster.resolve_run_dir(logdir, "exp/{task}", {}).run_dir == os.path.join(logdir, "exp")
    shared = cluster.resolve_run_dir(logdir, "same", env)
    assert shared.run_dir == os.path.join(logdir, "same") and "same on every task" in shared.notice
    assert shared.file_tag == "worker-1"
    for bad in ("../up", "/abs", "{nope}", "a/../../b"):
        with pytest.raises(ValueError):
            cluster.resolve_run_dir(logdir, bad, env)
    hostile = {"TF_CONFIG": json.dumps({"cluster": {"../../etc\x1b[31m/x": ["a:1", "b:1"]},
                                        "task": {"type": "../../etc\x1b[31m/x", "index": 1}})}
    placement = cluster.resolve_run_dir(logdir, None, hostile)
    assert os.path.dirname(placement.run_dir) == logdir
    name = os.path.basename(placement.run_dir)
    assert name == "_.._etc__31m_x-1" and cluster.safe_name("..") == "task"
    assert placement.identity["task_type"] == "../../etc\x1b[31m/x"  # recorded as data, exactly
    bad = cluster.resolve_run_dir(logdir, None, {"TF_CONFIG": "{oops"})
    assert bad.run_dir == logdir and bad.identity is None and "not JSON" in bad.notice


def test_monitor_with_a_malformed_tf_config_writes_one_run(tmp_path, monkeypatch, caplog):
    from tb_leak_plugin import Monitor

    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": "x"}}')
    with caplog.at_level(logging.WARNING, logger="tb_leak_plugin"):
        monitor = Monitor(str(tmp_path), probes=("python", "gc"))
        for step in range(3):
            monitor.sample(step)
        monitor.close()
    assert monitor.logdir == str(tmp_path) and monitor.task is None
    assert sum("TF_CONFIG task 'index'" in r.getMessage() for r in caplog.records) == 1
    assert list(reader.discover_runs(str(tmp_path))) == ["."]


def test_tasks_sharing_a_directory_never_share_a_file(tmp_path, monkeypatch, caplog):
    """Two tasks given one run name: two files (even with the same host, pid
    and second), the analysis warns that their series mix."""
    from tb_leak_plugin import Monitor

    monkeypatch.setattr(writer_lib, "_counter", itertools.count())
    first = writer_lib.RecordEventWriter(str(tmp_path / "x"), name_tag="worker-0")
    monkeypatch.setattr(writer_lib, "_counter", itertools.count())  # the same next name
    second = writer_lib.RecordEventWriter(str(tmp_path / "x"), name_tag="worker-0")
    assert first.path != second.path and os.path.basename(first.path).endswith(".worker-0.tbleak")
    first.close()
    second.close()

    logdir = tmp_path / "logs"
    with caplog.at_level(logging.WARNING, logger="tb_leak_plugin"):
        for index in (0, 1):
            monkeypatch.setenv("TF_CONFIG", _tf_config("worker", index))
            with Monitor(str(logdir), run_name="shared", probes=("python",)) as monitor:
                for step in range(3):
                    monitor.sample(step)
    assert any("same on every task" in r.getMessage() for r in caplog.records)
    from tb_leak_plugin.reporting.logdir import analyze_logdir

    report = analyze_logdir(str(logdir), with_traces=False).to_dict()
    [run] = report["runs"]
    assert any("event files of 2 tasks" in w and "worker-0, worker-1" in w for w in run["warnings"]), run["warnings"]


def _row(task_type, index, verdict, growth=None, spec=None, run=None, cluster_id="c1"):
    spec = spec or {"worker": 2}
    return {"run": run or f"job/{task_type}-{index}", "verdict": verdict, "growth_bytes_per_step": growth,
            "primary_tag": "leak/process/rss_anon_bytes", "top_culprit": None,
            "task": {"task_type": task_type, "task_index": index, "cluster_size": sum(spec.values()),
                     "cluster_id": cluster_id, "task_counts": spec, "host": "h", "pid": 1}}


def test_job_patterns():
    def job(*rows):
        [out] = jobs.group_jobs(list(rows))
        return out

    alike = job(_row("worker", 0, "leak", 1000.0), _row("worker", 1, "leak", 1300.0))
    assert alike["pattern"] == "alike" and "code every task runs" in alike["summary"]
    uneven = job(_row("worker", 0, "leak", 1000.0), _row("worker", 1, "leak", 9000.0))
    assert uneven["pattern"] == "uneven"
    one = job(_row("worker", 0, "no_leak"), _row("worker", 1, "leak", 5.0))
    assert one["pattern"] == "one" and one["leaking"] == ["worker-1"] and one["clean"] == ["worker-0"]
    assert one["summary"].startswith("job 'job': 2 tasks; worker-1 leaks, worker-0 clean -> one task leaks")
    chief_spec = {"chief": 1, "worker": 2}
    role = job(_row("chief", 0, "leak", 5.0, chief_spec), _row("worker", 0, "no_leak", spec=chief_spec),
               _row("worker", 1, "no_leak", spec=chief_spec))
    assert role["pattern"] == "role" and role["role"] == "chief" and "only the chief leaks" in role["summary"]
    assert [t["task"] for t in role["tasks"]] == ["chief-0", "worker-0", "worker-1"]
    zero = job(_row("worker", 0, "leak", 5.0), _row("worker", 1, "no_leak"))
    assert "worker-0 is the chief of a job without one" in zero["summary"]
    some = job(*[_row("worker", i, "leak" if i in (1, 3) else "no_leak", 5.0, {"worker": 4}) for i in range(4)])
    assert some["pattern"] == "some" and some["leaking"] == ["worker-1", "worker-3"]
    clean = job(_row("worker", 0, "no_leak"), _row("worker", 1, "inconclusive"))
    assert clean["verdict"] == "inconclusive" and clean["pattern"] == "inconclusive"
    missing = job(_row("worker", 0, "no_leak", spec={"worker": 3}))
    assert missing["missing"] == ["worker-1", "worker-2"]
    ps = job(_row("chief", 0, "no_leak", spec={"chief": 1, "worker": 2, "ps": 1}))
    assert ps["missing"] == [], "under parameter servers only the chief trains"
    # Two clusters under one parent are two jobs; runs of no cluster are in none.
    rows = [_row("worker", 0, "leak", 5.0, run="a/w0"), _row("worker", 1, "leak", 5.0, run="a/w1"),
            _row("worker", 0, "no_leak", run="a/x0", cluster_id="c2"), _row("worker", 1, "no_leak", run="a/x1", cluster_id="c2"),
            {"run": "solo", "verdict": "leak", "task": None}]
    found = jobs.group_jobs(rows)
    assert [j["job"] for j in found] == ["a (cluster c1)", "a (cluster c2)"]
    count, phrases = jobs.leak_count(rows, found)
    assert count == 2 and phrases == ["job 'a (cluster c1)' (worker-0, worker-1 of 2 tasks)", "run 'solo'"]


def test_identity_metadata_is_backward_compatible():
    info = metadata.task_series_info({"task_type": "worker", "task_index": 1, "cluster_size": 2, "host": "h",
                                      "pid": 7, "cluster_id": "abc", "task_counts": {"worker": 2},
                                      "run_named_by": "tf_config"})
    content = metadata.create_summary_metadata(info).plugin_data.content
    parsed = metadata.parse_plugin_metadata(content)
    assert parsed == info and parsed.task["task_counts"] == {"worker": 2} and parsed.tag == "leak/run/task"
    # A reader that knows only the five original fields sees a plain series.
    old = metadata.LeakPluginData.FromString(content)
    assert (old.version, old.group, old.measure, old.unit) == (0, "run", "task", "index")
    plain = metadata.SeriesInfo("process", "rss_bytes", "bytes")
    assert type(metadata.parse_plugin_metadata(metadata.create_summary_metadata(plain).plugin_data.content)) is \
        metadata.SeriesInfo


def test_job_blocks_print_hostile_names_inert():
    from tb_leak_plugin.reporting import cli

    name = "exp\x1b[2J\n| <b>x</b>"
    found = jobs.group_jobs([_row("worker", 0, "leak", 5.0, run=f"{name}/w0"), _row("worker", 1, "no_leak", run=f"{name}/w1")])
    report = {"logdir": "/l", "warnings": [], "runs": [], "jobs": found,
              "groups": [{"parent": name, "runs": [f"{name}/w0", f"{name}/w1"], "leaking": [f"{name}/w0"]}]}
    text = cli.format_text(report)
    assert "\x1b" not in text and "\\x1b[2J\\x0a| <b>x</b>" in text
    assert "group " not in text, "a group that is a job is shown once, as the job"
    markdown = cli.format_markdown(report)
    assert "\x1b" not in markdown and "<b>" not in markdown and "\\<b\\>" in markdown
