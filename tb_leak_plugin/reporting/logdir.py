"""Analyse a whole logdir: read runs and traces, build one report per run.

The edge between disk and the pure analysis. The CLI and the plugin both
call :func:`report_for_run`, so they never disagree.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import multiprocessing
import os
import re

from tb_leak_plugin.eventfile import reader as loading
from tb_leak_plugin.analysis import jobs as jobs_lib
from tb_leak_plugin.analysis.report import RunReport, build_run_report
from tb_leak_plugin.analysis.results import VERDICT_ORDER
from tb_leak_plugin.analysis.series import RunData

logger = logging.getLogger("tb_leak_plugin")


@dataclasses.dataclass
class LogdirReport:
    """Reports of every run in a logdir, plus worker groups and warnings."""

    logdir: str
    runs: list[RunReport]
    groups: list[dict]
    warnings: list[str]
    jobs: list = dataclasses.field(default_factory=list)  # analysis.jobs.group_jobs

    def to_dict(self) -> dict:
        return {
            "logdir": self.logdir,
            "runs": [run.to_dict() for run in self.runs],
            "groups": self.groups,
            "jobs": self.jobs,
            "warnings": list(self.warnings),
        }

    def leak_count(self) -> tuple[int, list[str]]:
        """Leaks as ``--fail-on-leak`` counts them: a job once, however many
        of its tasks leak (see ``analysis.jobs.leak_count``)."""
        return jobs_lib.leak_count([{"run": r.run, "verdict": r.verdict} for r in self.runs], self.jobs)

    @property
    def any_leak(self) -> bool:
        return any(run.verdict == "leak" for run in self.runs)


def load_traces(run_dir: str | None, max_bytes: int | None = None, has_profile: bool | None = None):
    """The run's profiler trace report, or None when it has no profile sessions.

    ``has_profile`` is what a listing of the logdir already said (False: skip
    looking, which for a remote run saves requests)."""
    if run_dir is None or has_profile is False:
        return None
    if "://" not in run_dir and not os.path.isdir(os.path.join(run_dir, "plugins", "profile")):
        return None  # no profiler output here: nothing to list
    from tb_leak_plugin.reporting import traces
    kwargs = {} if max_bytes is None else {"max_bytes": max_bytes}
    report = traces.analyze_run_traces(run_dir, **kwargs)
    return report if report.sessions else None


def report_for_run(run: RunData, with_traces: bool = True, max_trace_bytes: int | None = None,
                   has_profile: bool | None = None) -> RunReport:
    """Build the report for one run read from disk (traces from its directory).

    Trace files are named relative to the run directory (``sessions[].path``
    is ``plugins/profile/<session>/<host>.xplane.pb``, and so are the paths in
    trace errors), so the report never carries the server's absolute paths
    and the CLI and the Leak tab build the same report. A distributed job's
    task identity is taken out of the series into ``run.task``."""
    if run.task is None:
        run.task = jobs_lib.take_task(run)
    trace_report = None
    if with_traces:
        try:
            trace_report = load_traces(run.path, max_trace_bytes, has_profile)
        except Exception as error:  # a bad trace must not hide the series verdict
            run.warnings.append(f"profiler traces of {run.name!r} unreadable: "
                                f"{_relative_to(run.path, str(error))}")
        if trace_report is not None:
            for session in trace_report.sessions:
                session.path = _relative_to(run.path, session.path)
                if session.error:
                    session.error = _relative_to(run.path, session.error)
    shared = shared_run_warning(run.path)
    if shared and shared not in run.warnings:
        run.warnings.append(shared)
    report = build_run_report(run, trace_report)
    report.task = run.task
    return report


def _relative_to(run_dir: str | None, text: str) -> str:
    """``text`` with ``run_dir/`` taken off the front of every path in it
    (a path starts the text or follows a space, quote or bracket)."""
    root = (run_dir or "").rstrip("/" + os.sep)
    if not root or not text or root not in text:
        return text
    separators = "".join(sorted({"/", os.sep}))
    return re.sub(r"(?<![^\s'\"(\[])" + re.escape(root) + "[" + re.escape(separators) + "]", "", text)


def _analyze_run(name: str, location, with_traces: bool, max_trace_bytes: int | None) -> RunReport:
    if isinstance(location, str):
        location = loading.RunLocation(location)
    run_dir = location.path
    try:
        return report_for_run(loading.load_run(name, run_dir, location.files), with_traces, max_trace_bytes,
                              location.has_profile)
    except Exception as error:  # one unreadable run must not sink the others
        logger.warning("tb-leak: run %r could not be analysed: %s", name, error)
        run = RunData(name=name, path=run_dir,
                      warnings=[f"{run_dir}: could not be analysed ({type(error).__name__}: {error})"])
        return build_run_report(run)


_TASK_FILE = re.compile(r"\.([A-Za-z0-9_-]+-\d+)\.tbleak$")


def shared_run_warning(run_dir: str | None) -> str | None:
    """A warning when event files of several tasks of a job lie in one run
    directory (every task given the same ``run_name``): their series are
    read as one run. The tasks are told apart by the task in the file names."""
    if run_dir is None or loading.is_remote(run_dir):  # (one more listing per remote run: not worth it)
        return None
    try:
        names = [os.path.basename(path) for path in loading.event_files(run_dir)]
    except Exception:
        return None
    tasks = sorted({match.group(1) for match in map(_TASK_FILE.search, names) if match})
    if len(tasks) < 2:
        return None
    return (f"this run holds the event files of {len(tasks)} tasks of a job ({', '.join(tasks[:6])}"
            f"{', ...' if len(tasks) > 6 else ''}): their series are read as one run; give each task its own "
            "run (Monitor's default in a cluster, or run_name='{task}')")


def default_jobs(run_count: int, remote: bool = False) -> int:
    """Worker processes worth using for ``run_count`` runs (1 = in process).

    A remote logdir gets more workers than cores: each waits on requests
    (1,000 runs on a local S3 server, 2 busy cores, best of 3: 89 s with 1
    worker, 58 s with 4, 49 s with 16; benchmarks/bench_remote.py)."""
    if run_count < 8 or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    cores = os.cpu_count() or 1
    if remote:
        return max(1, min(4 * cores, 16, run_count // 4))
    return max(1, min(cores, 8, run_count // 4))


def analyze_logdir(logdir: str, run_filter: str | None = None, with_traces: bool = True,
                   max_trace_bytes: int | None = None, jobs: int | None = None) -> LogdirReport:
    """Read and analyse every run of ``logdir`` matching ``run_filter``.

    Runs are ordered leaks first, then inconclusive, then clean, by name
    within each. Runs are spread over ``jobs`` forked worker processes
    (default: by core and run count). Subdirectories that cannot be listed
    are skipped and named in the report's warnings. Raises
    ``loading.LogdirError`` when the logdir itself cannot be read.
    """
    pattern = re.compile(run_filter) if run_filter else None
    walk_warnings: list[str] = []
    runs = {name: location for name, location in loading.locate_runs(logdir, walk_warnings).items()
            if pattern is None or pattern.search(name)}
    jobs = default_jobs(len(runs), loading.is_remote(logdir)) if jobs is None else max(1, int(jobs))
    arguments = [(name, location, with_traces, max_trace_bytes) for name, location in runs.items()]
    if jobs > 1:
        context = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
            reports = list(pool.map(_analyze_run, *zip(*arguments), chunksize=max(1, len(arguments) // (4 * jobs))))
    else:
        reports = [_analyze_run(*args) for args in arguments]
    reports.sort(key=lambda r: (VERDICT_ORDER.get(r.verdict, 3), r.run))
    groups = []
    verdicts = {r.run: r.verdict for r in reports}
    for parent, names in sorted(loading.group_names(list(runs)).items()):
        groups.append({
            "parent": parent,
            "runs": names,
            "leaking": [n for n in names if verdicts.get(n) == "leak"],
        })
    warnings = list(walk_warnings)
    if not runs:
        warnings.append(
            f"no event files under {logdir!r}: write summaries with tb_leak_plugin.Monitor(logdir) first"
        )
    elif not any(r.series for r in reports):
        warnings.append(f"event files under {logdir!r} hold no tb-leak series")
    job_rows = [{"run": r.run, "verdict": r.verdict, "task": r.task,
                 "growth_bytes_per_step": r.growth_bytes_per_step, "primary_tag": r.primary_tag,
                 "top_culprit": {"kind": r.culprits[0].kind, "name": r.culprits[0].name} if r.culprits else None}
                for r in reports]
    return LogdirReport(logdir=logdir, runs=reports, groups=groups, warnings=warnings,
                        jobs=jobs_lib.group_jobs(job_rows))
