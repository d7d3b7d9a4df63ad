"""Analyse a whole logdir: read runs and traces, build one report per run.

The edge between disk and the pure analysis. The CLI and the plugin both
call :func:`report_for_run`, so they never disagree.
"""

from __future__ import annotations

import dataclasses
import logging

from tb_leak_plugin import loading
from tb_leak_plugin.analysis.report import RunReport, build_run_report
from tb_leak_plugin.data import RunData

logger = logging.getLogger("tb_leak_plugin")


@dataclasses.dataclass
class LogdirReport:
    """Reports of every run in a logdir, plus worker groups and warnings."""

    logdir: str
    runs: list[RunReport]
    groups: list[dict]
    warnings: list[str]

    def to_dict(self) -> dict:
        return {
            "logdir": self.logdir,
            "runs": [run.to_dict() for run in self.runs],
            "groups": self.groups,
            "warnings": list(self.warnings),
        }

    @property
    def any_leak(self) -> bool:
        return any(run.verdict == "leak" for run in self.runs)


def load_traces(run_dir: str | None, max_bytes: int | None = None):
    """The run's profiler trace report, or None when it has no profile sessions."""
    if run_dir is None:
        return None
    from tb_leak_plugin import traces
    kwargs = {} if max_bytes is None else {"max_bytes": max_bytes}
    report = traces.analyze_run_traces(run_dir, **kwargs)
    return report if report.sessions else None


def report_for_run(run: RunData, with_traces: bool = True, max_trace_bytes: int | None = None) -> RunReport:
    """Build the report for one run read from disk (traces from its directory)."""
    trace_report = None
    if with_traces:
        try:
            trace_report = load_traces(run.path, max_trace_bytes)
        except Exception as error:  # a bad trace must not hide the series verdict
            run.warnings.append(f"profiler traces of {run.name!r} unreadable: {error}")
    return build_run_report(run, trace_report)


def analyze_logdir(logdir: str, run_filter: str | None = None, with_traces: bool = True,
                   max_trace_bytes: int | None = None) -> LogdirReport:
    """Read and analyse every run of ``logdir`` matching ``run_filter``.

    Runs are ordered leaks first, then inconclusive, then clean, by name
    within each. Raises ``loading.LogdirError`` for an unreadable logdir.
    """
    data = loading.load_logdir(logdir, run_filter=run_filter)
    reports = [report_for_run(run, with_traces, max_trace_bytes) for run in data.runs]
    order = {"leak": 0, "inconclusive": 1, "no_leak": 2}
    reports.sort(key=lambda r: (order.get(r.verdict, 3), r.run))
    groups = []
    verdicts = {r.run: r.verdict for r in reports}
    for parent, names in sorted(loading.group_runs(data.runs).items()):
        groups.append({
            "parent": parent,
            "runs": names,
            "leaking": [n for n in names if verdicts.get(n) == "leak"],
        })
    warnings = list(data.warnings)
    if not data.runs:
        warnings.append(
            f"no event files under {logdir!r}: write summaries with tb_leak_plugin.Monitor(logdir) first"
        )
    elif not any(r.series for r in data.runs):
        warnings.append(f"event files under {logdir!r} hold no tb-leak series")
    return LogdirReport(logdir=logdir, runs=reports, groups=groups, warnings=warnings)
