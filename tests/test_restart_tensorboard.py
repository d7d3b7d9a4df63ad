"""A restarted job reads the same in ``tb-leak analyze`` and in the Leak tab.

The job wrote steps 0-999, was restarted from its step-500 checkpoint and is
now at step 950, in a second event file. TensorBoard drops what the dead
attempt wrote at step 500 and later ("purge orphaned data"); the CLI must do
the same, and the tab must agree with it under both ``--load_fast`` settings
(the Rust data server and the Python multiplexer). A real ``tensorboard``
process serves the plugin's ``report`` route; about 30 s in all.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.parse

import numpy as np
import pytest

from tb_leak_plugin.metadata import SeriesInfo
from tb_leak_plugin.reporting import cli
from tb_leak_plugin.summary import EventWriter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest_plugin as cp  # noqa: E402

RSS = SeriesInfo("process", "rss_bytes", "bytes")
RUN = "job"
# What may differ between a report read from disk and one read through TensorBoard.
PATH_FIELDS = ("warnings", "traces")


def _next_second() -> None:
    second = int(time.time())
    while int(time.time()) == second:
        time.sleep(0.02)


def write_restarted_job(run_dir: str) -> None:
    rng = np.random.default_rng(3)
    start = time.time() - 4000
    dead = EventWriter(run_dir)  # the first attempt: flat memory, steps 0-999
    for step in range(1000):
        dead.write(step, [(RSS, 500e6 + rng.normal(0, 200_000))], wall_time=start + step)
    dead.close()
    _next_second()  # event files are named by the second they were opened in
    resumed = EventWriter(run_dir)  # restarted from the step-500 checkpoint, leaking, now at 950
    for step in range(500, 951):
        resumed.write(step, [(RSS, 500e6 + 400_000 * (step - 500) + rng.normal(0, 200_000))],
                      wall_time=start + 2000 + step)
    resumed.close()
    names = sorted(n for n in os.listdir(run_dir) if "tfevents" in n)
    assert [os.path.join(run_dir, n) for n in names] == [dead._writer.path, resumed._writer.path]


class _Board(cp.TensorBoardProcess):
    def wait_ready(self, timeout: float = 90.0, min_runs: int = 1, min_leak_runs: int = 1) -> None:
        super().wait_ready(timeout=timeout, min_runs=min_runs, min_leak_runs=min_leak_runs)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("restarted")
    write_restarted_job(str(root / RUN))
    return str(root)


@pytest.fixture(scope="module")
def cli_report(logdir):
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["analyze", logdir, "--format", "json"]) == 0
    (report,) = json.loads(out.getvalue())["runs"]
    return report


def test_the_cli_drops_the_dead_attempts_steps(cli_report):
    (series,) = [s for s in cli_report["series"] if s["tag"] == RSS.tag]
    assert series["last_step"] == 950 and series["samples"] == 951
    assert cli_report["verdict"] == "leak"


@pytest.mark.parametrize("load_fast", [True, False], ids=["load_fast=true", "load_fast=false"])
def test_the_tab_reports_what_the_cli_reports(logdir, cli_report, load_fast):
    with _Board(logdir, load_fast=load_fast) as board:
        query = urllib.parse.urlencode({"run": RUN})
        deadline = time.time() + 30
        while True:  # the data server may still be loading the second file
            tab = board.get_json(f"/data/plugin/leak/report?{query}")
            series = {s["tag"]: s for s in tab["series"]}
            if series.get(RSS.tag, {}).get("samples") == 951 or time.time() > deadline:
                break
            time.sleep(1)
    assert series[RSS.tag]["last_step"] == 950 and series[RSS.tag]["samples"] == 951
    strip = lambda report: {k: v for k, v in report.items() if k not in PATH_FIELDS}  # noqa: E731
    assert strip(tab) == strip(cli_report)
    assert tab["verdict"] == "leak"
