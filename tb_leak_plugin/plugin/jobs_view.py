"""The ``jobs`` part of the Leak tab's ``runs`` listing (pure).

Runs written by the tasks of one ``tf.distribute`` job are grouped by
:func:`tb_leak_plugin.analysis.jobs.group_jobs`, the same grouping the CLI
prints, from the rows of the listing (each row carries its ``task``).
"""

from __future__ import annotations

from tb_leak_plugin.analysis import jobs as jobs_lib


def with_jobs(body: dict) -> dict:
    """``body`` (the ``runs`` listing) with ``jobs`` added and each row's
    ``job`` set (None for runs of no job)."""
    rows = body.get("runs", [])
    jobs = jobs_lib.group_jobs([
        {"run": row["run"], "verdict": row["verdict"], "task": row.get("task"),
         "growth_bytes_per_step": row.get("growth_bytes_per_step"), "primary_tag": row.get("primary_tag"),
         "top_culprit": row.get("top_culprit")}
        for row in rows if row.get("task")
    ])
    job_of = {run: job["job"] for job in jobs for run in job["runs"]}
    for row in rows:
        row.setdefault("task", None)
        row["job"] = job_of.get(row["run"])
    body["jobs"] = jobs
    return body
