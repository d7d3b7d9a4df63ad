"""The JSON the Leak tab's charts and tables read, shaped from one run's report.

Pure: report dicts and point arrays in, JSON-ready dicts out; no TensorBoard,
no I/O. :mod:`tb_leak_plugin.plugin.leak_plugin` finds the run's cached report, checks the
request and raises TensorBoard's errors; the shapes are documented in
``http_api.md``.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from tb_leak_plugin.analysis.results import VERDICT_ORDER
from tb_leak_plugin.plugin.downsample import downsample_indices

SPARKLINE_POINTS = 64

_CHART_ROLES = ("memory", "tensors", "traces")


@dataclasses.dataclass
class Points:
    """A series' finite points, ready to downsample."""

    steps: np.ndarray
    wall_times: np.ndarray
    values: np.ndarray


def run_row(run: str, report: dict) -> dict:
    """One row of the ``runs`` listing: the run's verdict, growth (bytes per
    step and per hour) and chartable tags."""
    top = report["culprits"][0] if report["culprits"] else None
    return {
        "run": run,
        "verdict": report["verdict"],
        "confidence": report["confidence"],
        "reason": report["reason"],
        "growth_bytes_per_step": report["growth_bytes_per_step"],
        "growth_bytes_per_hour": report["growth_bytes_per_hour"],
        "primary_tag": report["primary_tag"],
        "samples": report["samples"],
        "top_culprit": {"kind": top["kind"], "name": top["name"]} if top else None,
        "has_traces": bool(report.get("traces")),
        "warnings": len(report["warnings"]),
        "tags": [
            {"tag": s["tag"], "unit": s["unit"], "role": s["role"]}
            for s in report["series"] if s["role"] in _CHART_ROLES
        ],
    }


def failed_run_row(run: str, error: Exception) -> dict:
    """The ``runs`` row of a run whose analysis raised ``error``."""
    return {"run": run, "verdict": "error", "confidence": 0.0,
            "reason": f"analysis failed: {type(error).__name__}: {error}",
            "growth_bytes_per_step": None, "growth_bytes_per_hour": None,
            "primary_tag": None, "samples": 0, "top_culprit": None,
            "has_traces": False, "warnings": 1, "tags": []}


def runs_listing(rows: list) -> dict:
    """The ``runs`` body: ``rows`` sorted leaks first, then by run name."""
    rows.sort(key=lambda r: (VERDICT_ORDER.get(r["verdict"], 3), r["run"]))
    return {"runs": rows}


def timeline(run, tag, points: Points, series: dict, x: str, max_points: int) -> dict:
    """One series downsampled to at most ``max_points`` points, x in steps or
    wall-time seconds, with its fitted trend, warm-up end and onset."""
    xs = points.steps if x == "step" else points.wall_times
    idx = downsample_indices(points.values, max_points)

    def to_x(step):
        if step is None or not len(points.steps):
            return None
        if x == "step":
            return int(step)
        return float(np.interp(float(step), points.steps, points.wall_times))

    fit = series.get("fit") or {}
    trend = None
    if fit.get("start_step") is not None and fit.get("end_value") is not None:
        start, end = to_x(fit["start_step"]), to_x(fit["end_step"])
        trend = {
            "x": [start, end],
            "y": [fit["start_value"], fit["end_value"]],
            "low": [fit["start_value"], fit.get("ci_low_end")],
            "high": [fit["start_value"], fit.get("ci_high_end")],
        }
    return {
        "run": run,
        "tag": tag,
        "unit": series["unit"],
        "role": series["role"],
        "x": x,
        "verdict": series["verdict"],
        "confidence": series.get("confidence"),
        "slope_per_step": series.get("slope_per_step"),
        "slope_ci": series.get("slope_ci"),
        "reason": series.get("reason"),
        "total_points": int(points.values.shape[0]),
        "downsampled": int(idx.shape[0]) < int(points.values.shape[0]),
        "points": {"x": xs[idx].tolist(), "y": points.values[idx].tolist()},
        "trend": trend,
        "warmup_end": to_x(series.get("warmup_end_step")),
        "onset": to_x(series.get("onset_step")),
    }


def objects(run: str, report: dict, series_reports: dict, points: dict) -> dict:
    """The ``objects`` body: live-object types (counts), growing ones first,
    each with a sparkline of at most ``SPARKLINE_POINTS`` points, and the total.

    ``series_reports`` maps tag to the report's series dict, ``points`` tag
    to :class:`Points`.
    """
    # Object culprits carry their series' tag (the total's name is prose).
    culprits = {c["details"].get("tag"): (rank, c) for rank, c in enumerate(report["culprits"])
                if c["kind"] == "object_type"}
    types = []
    total = None
    for tag, series in series_reports.items():
        series_points = points.get(tag)
        if series_points is None:
            continue
        is_total = series["group"] == "gc" and series["measure"] == "tracked_objects"
        if series["group"] != "objects" and not is_total:
            continue
        idx = downsample_indices(series_points.values, SPARKLINE_POINTS)
        name = series["subject"] or series["measure"]
        rank, culprit = culprits.get(tag, (None, None))
        row = {
            "name": name,
            "tag": tag,
            "verdict": series["verdict"],
            "growing": culprit is not None,
            "rank": rank,
            "growth_per_step": series.get("slope_per_step"),
            "confidence": culprit["confidence"] if culprit else series.get("confidence"),
            "evidence": culprit["evidence"] if culprit else series.get("reason"),
            "hint": culprit["hint"] if culprit else None,
            "first_count": float(series_points.values[0]) if len(series_points.values) else None,
            "last_count": series["last_value"],
            "sparkline": {"step": series_points.steps[idx].tolist(),
                          "count": series_points.values[idx].tolist()},
        }
        if is_total:
            total = row
        else:
            types.append(row)
    types.sort(key=lambda r: (
        0 if r["growing"] else 1,
        r["rank"] if r["rank"] is not None else 0,
        -(r["growth_per_step"] or 0.0),
        r["name"],
    ))
    return {"run": run, "types": types, "total": total}


def relative_paths(value, run_dir: str | None, logdir_root: str | None = None):
    """``value`` (a report dict, list or string) with the server's absolute
    paths taken out of every string: the run directory's prefix is dropped
    (``<run_dir>/plugins/profile/s/h.xplane.pb`` becomes
    ``plugins/profile/s/h.xplane.pb``), then the logdir's. A copy; pure."""
    prefixes = [p.rstrip("/") for p in (run_dir, logdir_root)
                if p and (p.startswith("/") or "://" in p) and p.rstrip("/")]
    if not prefixes:
        return value
    # The prefix as a whole path: followed by "/" or by what ends a path in prose.
    patterns = [(prefix, re.compile(re.escape(prefix) + r"(/|(?=$|[\s'\":,;)\]]))")) for prefix in prefixes]

    def strip(text: str) -> str:
        for prefix, pattern in patterns:
            if prefix in text:
                text = pattern.sub(lambda m: "" if m.group(1) == "/" else ".", text)
        return text

    def walk(item):
        if isinstance(item, str):
            return strip(item)
        if isinstance(item, dict):
            return {key: walk(inner) for key, inner in item.items()}
        if isinstance(item, (list, tuple)):
            return [walk(inner) for inner in item]
        return item

    return walk(value)


def _session_path(path):
    """A trace file's path as the ``ops`` route shows it: relative to the run
    directory (from ``plugins/``), never absolute."""
    if not isinstance(path, str) or not path.startswith("/"):
        return path
    marker = "/plugins/profile/"
    at = path.rfind(marker)
    return path[at + 1:] if at >= 0 else path.rsplit("/", 1)[-1]


def ops(run: str, report: dict) -> dict:
    """The ``ops`` body: ops the profiler trace shows retaining memory across
    steps, most retained bytes first, with the sessions and coverage notes.
    Trace files are named relative to the run directory."""
    traces = report.get("traces") or {}
    sessions, flattened, notes = [], [], []
    for session in traces.get("sessions", []) or []:
        label = "/".join(str(p) for p in (session.get("session"), session.get("host")) if p)
        shown = {k: v for k, v in session.items() if k not in ("ops", "suspicious")}
        if "path" in shown:
            shown["path"] = _session_path(shown["path"])
        sessions.append(shown)
        if session.get("error"):
            notes.append(f"{label}: {session['error']}")
        if session.get("coverage_note"):
            notes.append(f"{label}: {session['coverage_note']}")
        for op in session.get("suspicious") or []:
            flattened.append(dict(op, session=session.get("session"), host=session.get("host")))
    # Merged across sessions and hosts by the trace analysis when it offers that.
    merged = traces.get("suspicious_ops")
    op_rows = [dict(op) for op in merged] if merged is not None else flattened
    op_rows.sort(key=lambda o: -(o.get("retained_bytes") or 0))
    if not traces:
        notes.append("no profiler trace in this run: pass profile_steps=(start, stop) to "
                     "tb_leak_plugin.Monitor to record one")
    return {"run": run, "has_traces": bool(traces), "ops": op_rows, "sessions": sessions,
            "notes": notes}


def compare(tag: str, x: str, timelines: list, missing: list) -> dict:
    """The ``compare`` body: one :func:`timeline` per run that has ``tag``;
    ``missing`` names the runs that lack it. The unit is the first one given."""
    unit = None
    for line in timelines:
        unit = unit or line["unit"]
    return {"tag": tag, "unit": unit, "x": x, "series": timelines, "missing": missing}
