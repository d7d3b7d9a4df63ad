"""The values a run's analysis produces: a series' verdict (``TrendResult``,
with the text its evidence is written in), series reports, culprits, the run report.

Plain dataclasses with ``to_dict()`` for the JSON every surface serves; built
by :mod:`tb_leak_plugin.analysis.report` and :mod:`tb_leak_plugin.analysis.census`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tb_leak_plugin.analysis import hints as hints_lib
from tb_leak_plugin.units import format_quantity


@dataclasses.dataclass
class TrendResult:
    """The verdict on one series, with its evidence, in the series' unit.

    verdict: "leak", "no_leak" or "inconclusive".
    confidence: for a leak, 1 - p that growth is at most ``materiality``; for
      no_leak, 1 - p that it is at least that; for inconclusive, 1 minus the
      larger of those two (1.0 when there were too few samples).
    slope_per_step, slope_ci: the current growth per step (the last
      segment's) and its 95% interval, widened for autocorrelated noise: the
      hull of the intervals of every reading the verdict had to hold under.
    materiality: the growth per step a leak claim is tested against.
    clean_materiality: the growth per step "no leak" is held under (times
      ``Policy.clean_horizon``): the same, but for a part of the process's
      memory, whose leak must be material to the whole (``Policy.materiality``).
    p_value: one-sided p that growth is not material (for Benjamini-Hochberg).
    onset_step: where the current segment starts (leaks only).
    warmup_end_step: where the current segment starts when earlier segments
      (warm-up, a fill, a step) were set aside; None if none.
    total_growth: the current slope over the current segment.
    decide_steps: for inconclusive, about how many more steps would decide
      at the current rate and noise (None if not within 64x the run).
    shape: leak: "growth", "growth_under_resets"; no_leak: "flat", "plateau"
      (grew earlier, flat now), "step" (a jump, flat since), "resets" (a
      sawtooth with a flat floor); inconclusive: "unclear", "too_few".
    """

    verdict: str
    confidence: float
    slope_per_step: float
    slope_ci: tuple
    slope_per_hour: float | None
    p_value: float
    onset_step: int | None
    warmup_end_step: int | None
    samples: int
    noise: float
    total_growth: float
    seconds_to_exhaustion: float | None
    steps_to_exhaustion: float | None
    fit: dict
    reason: str
    unit: str = "bytes"
    dropped_samples: int = 0
    shape: str = ""
    materiality: float = math.nan
    clean_materiality: float = math.nan
    decide_steps: int | None = None
    #: The slope's standard error and degrees of freedom (widened for
    #: autocorrelation): what `analysis.compare` tests a difference with.
    slope_se: float = math.nan
    slope_df: float = math.nan
    #: [slope, se, df] of every reading of the current segment that a clean
    #: claim must hold under, and of those a growth claim must hold under
    #: (empty: no growth claim can be made, e.g. a buffer still refilling).
    readings: list = dataclasses.field(default_factory=list)
    leak_readings: list = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        """A JSON-safe dict: non-finite numbers become None, tuples lists."""
        return _json_safe(dataclasses.asdict(self))


# Verdicts from the most to the least alarming: the order runs are listed in.
VERDICT_ORDER = {"leak": 0, "inconclusive": 1, "no_leak": 2}


@dataclasses.dataclass
class SeriesReport:
    """One series' verdict and evidence (``trend`` is None for context series)."""

    tag: str
    group: str
    measure: str
    subject: str
    unit: str
    role: str
    samples: int
    first_step: int | None
    last_step: int | None
    last_value: float | None
    trend: TrendResult | None
    #: The memory limit the time to exhaustion is projected against (its
    #: name, e.g. "cgroup v2 memory.max", and size); None when not known.
    memory_limit: str | None = None
    memory_limit_bytes: float | None = None
    #: A memory series whose fall at close() came before the last walk's
    #: collection: the program's live data, let go when the loop returned.
    let_go_before_collection: bool = False
    #: A memory series that leaks and whose readings right after the full
    #: collections of the training's walks grew with it: live data, not
    #: garbage waiting for the collector.
    live_after_full: bool = False

    @property
    def verdict(self) -> str:
        return self.trend.verdict if self.trend is not None else "not_assessed"

    def to_dict(self) -> dict:
        trend = self.trend.to_dict() if self.trend is not None else {}
        out = {
            "tag": self.tag,
            "group": self.group,
            "measure": self.measure,
            "subject": self.subject,
            "unit": self.unit,
            "role": self.role,
            "verdict": self.verdict,
            "samples": self.samples,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "last_value": finite_or_none(self.last_value),
            "memory_limit": self.memory_limit,
            "memory_limit_bytes": finite_or_none(self.memory_limit_bytes),
        }
        for key, value in trend.items():
            out.setdefault(key, value)
        out["verdict"] = self.verdict
        return out


@dataclasses.dataclass
class Culprit:
    """Something that grows, ranked by how sure and how big.

    ``kind`` is one of ``object_type``, ``tensors``, ``retracing``,
    ``series``, ``op``, ``gc``; ``growth_per_step`` is in ``unit`` per step.
    """

    kind: str
    name: str
    growth_per_step: float | None
    unit: str
    evidence: str
    confidence: float
    hint: str | None = None
    details: dict = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "name": self.name,
            "growth_per_step": finite_or_none(self.growth_per_step),
            "unit": self.unit,
            "evidence": self.evidence,
            "confidence": round(float(self.confidence), 4),
            "hint": self.hint,
            "details": self.details,
        }


@dataclasses.dataclass
class RunReport:
    """Everything tb-leak concludes about one run."""

    run: str
    verdict: str
    confidence: float
    reason: str
    growth_bytes_per_step: float | None
    growth_bytes_per_hour: float | None
    primary_tag: str | None
    samples: int
    series: list[SeriesReport]
    culprits: list[Culprit]
    hints: list[hints_lib.Hint]
    warnings: list[str]
    traces: dict | None = None
    task: dict | None = None  # the distributed job's task that wrote the run (analysis.jobs)
    #: Known leaks of TensorFlow/Keras among the culprits (analysis.library_leaks), as dicts.
    library_leaks: list = dataclasses.field(default_factory=list)
    #: Leaks the watch traced while the run trained that its end does not show
    #: (analysis.holders.traced_earlier): kind, name, step, live, held_by.
    traced_earlier: list = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "run": self.run,
            "verdict": self.verdict,
            "confidence": round(float(self.confidence), 4),
            "reason": self.reason,
            "growth_bytes_per_step": finite_or_none(self.growth_bytes_per_step),
            "growth_bytes_per_hour": finite_or_none(self.growth_bytes_per_hour),
            "primary_tag": self.primary_tag,
            "samples": self.samples,
            "series": [s.to_dict() for s in self.series],
            "culprits": [c.to_dict() for c in self.culprits],
            "hints": [h.to_dict() for h in self.hints],
            "warnings": list(self.warnings),
            "traces": self.traces,
            "task": self.task,
            "library_leaks": list(self.library_leaks),
            "traced_earlier": list(self.traced_earlier),
        }


def finite_or_none(value):
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


# --------------------------------------------------------------------------- a verdict's text


def too_few(n, need, unit, dropped, note, walls) -> TrendResult:
    span = ""
    if walls is not None and walls.size >= 2 and np.all(np.isfinite(walls[[0, -1]])) and walls[-1] > walls[0]:
        span = f" over {_duration(float(walls[-1] - walls[0]))}"
    return TrendResult(
        verdict="inconclusive", confidence=1.0, slope_per_step=math.nan, slope_ci=(math.nan, math.nan),
        slope_per_hour=None, p_value=1.0, onset_step=None, warmup_end_step=None, samples=n, noise=math.nan,
        total_growth=math.nan, seconds_to_exhaustion=None, steps_to_exhaustion=None, fit={},
        reason=(f"only {n} finite sample{'s' if n != 1 else ''} at distinct steps, need at least {need}{note} "
                f"({n} samples{span}: run longer, or sample more densely with Monitor(overhead_budget=0.05))"),
        unit=unit, dropped_samples=dropped, shape="too_few")


def samples_note(dropped, left_out):
    notes = []
    if dropped:
        notes.append(f"{dropped} non-finite sample{'s' if dropped != 1 else ''} dropped")
    if left_out:
        notes.append(f"{left_out} isolated spike{'s' if left_out != 1 else ''} or final release left out")
    return f" ({'; '.join(notes)})" if notes else ""


def fit_dict(t_start, t_end, level, slope, lo, hi, t_segment=None):
    """The fitted line of the current segment, from ``start_step`` (its first
    points trimmed) to ``end_step``; ``segment_step``: where the segment
    itself begins."""
    span = t_end - t_start
    return {"start_step": int(t_start), "end_step": int(t_end), "start_value": level,
            "end_value": level + slope * span, "ci_low_end": level + lo * span,
            "ci_high_end": level + hi * span,
            "segment_step": int(t_start if t_segment is None or not math.isfinite(t_segment) else t_segment)}


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    return f"{seconds / 60:.3g} min" if seconds < 7200 else f"{seconds / 3600:.3g} h"


def fmt_range(lo, hi, unit):
    """"3.8-4.4 KiB" when both ends share a suffix, else "900 B to 1.1 KiB"."""
    a, b = fmt(lo, unit), fmt(hi, unit)
    a_num, _, a_suffix = a.partition(" ")
    b_num, _, b_suffix = b.partition(" ")
    if a_suffix == b_suffix and a_suffix:
        return f"{a_num} to {b_num} {a_suffix}" if lo < 0 else f"{a_num}-{b_num} {a_suffix}"
    return f"{a} to {b}"


def fmt(x, unit):
    if x is None or not math.isfinite(x):
        return "n/a"
    return format_quantity(0.0 if abs(x) < 1e-9 else x, unit)


def clip01(x):
    return float(min(1.0, max(0.0, x))) if math.isfinite(x) else 0.0


def _json_safe(obj):
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    return obj
