"""Text and markdown blocks for distributed jobs in ``tb-leak analyze``.

The CLI prints one block per job after the runs: its tasks side by side
(verdict, memory growth, top culprit, host) and what the pattern usually
means. Lines are made inert by the CLI's own :func:`printable` /
markdown escaping (names come from the data).
"""

from __future__ import annotations

from tb_leak_plugin.units import format_bytes

_LABEL = {"leak": "LEAK", "no_leak": "no leak", "inconclusive": "inconclusive"}


def _growth(value) -> str:
    return "-" if value is None else format_bytes(value, True) + "/step"


def job_lines(job: dict) -> list[str]:
    """The text block of one job (not yet passed through ``printable``)."""
    label = _LABEL.get(job["verdict"], job["verdict"])
    count = len(job["tasks"])
    lines = [f"== job {job['job']}: {label} ({count} task{'s' if count != 1 else ''}"
             f"{', cluster of ' + str(job['cluster_size']) if job.get('cluster_size') else ''})",
             f"   {job['summary']}"]
    tasks = job["tasks"]
    width_task = max([len("task")] + [len(t["task"]) for t in tasks])
    width_run = max([len("run")] + [len(t["run"]) for t in tasks])
    lines.append(f"     {'task':<{width_task}}  {'run':<{width_run}}  {'verdict':<12}  {'memory growth':>18}  "
                 "top culprit")
    for task in tasks:
        culprit = task.get("top_culprit")
        culprit_text = f"[{culprit['kind']}] {culprit['name']}" if culprit else "-"
        verdict = _LABEL.get(task["verdict"], task["verdict"])
        lines.append(f"     {task['task']:<{width_task}}  {task['run']:<{width_run}}  {verdict:<12}  "
                     f"{_growth(task.get('growth_bytes_per_step')):>18}  {culprit_text}")
    if job.get("missing"):
        lines.append(f"   no run from: {missing_text(job)} (not started, no Monitor there, or left out by --run)")
    if job.get("duplicated"):
        lines.append(f"   several runs claim {', '.join(job['duplicated'])} (a restarted job under new run names?)")
    return lines


def missing_text(job: dict) -> str:
    """The tasks without a run: those listed, then how many more (a cluster
    may claim millions of tasks; the listing is bounded)."""
    listed = list(job.get("missing") or [])
    total = job.get("missing_count")
    total = total if isinstance(total, int) and total >= len(listed) else len(listed)
    more = total - len(listed)
    return ", ".join(listed) + (f" and {more:,} more" if more else "")


def groups_not_jobs(report: dict) -> list[dict]:
    """The report's directory groups, less those that a job block already shows."""
    shown = {frozenset(job["runs"]) for job in report.get("jobs", [])}
    return [group for group in report.get("groups", []) if frozenset(group["runs"]) not in shown]


def markdown_lines(job: dict, escape) -> list[str]:
    """The markdown block of one job; ``escape`` makes data inert."""
    icon = {"leak": "🔴", "no_leak": "🟢"}.get(job["verdict"], "⚪")
    lines = ["", f"### job {escape(job['job'])} {icon}", "", escape(job["summary"]), "",
             "| task | run | verdict | memory growth / step |", "|---|---|---|---|"]
    for task in job["tasks"]:
        lines.append(f"| {escape(task['task'])} | {escape(task['run'])} | "
                     f"{_LABEL.get(task['verdict'], task['verdict'])} | {_growth(task.get('growth_bytes_per_step'))} |")
    if job.get("missing"):
        lines += ["", escape(f"No run from: {missing_text(job)}.")]
    return lines


def fail_message(count: int, phrases: list[str]) -> str:
    """What ``--fail-on-leak`` prints on stderr when it exits 1."""
    shown = "; ".join(phrases[:10]) + (f"; and {len(phrases) - 10} more" if len(phrases) > 10 else "")
    return f"--fail-on-leak: {count} leak{'s' if count != 1 else ''} found (a job counts once): {shown}"
