"""The values a run's analysis produces: series verdicts, culprits, the run report.

Plain dataclasses with ``to_dict()`` for the JSON every surface serves; built
by :mod:`tb_leak_plugin.analysis.report` and :mod:`tb_leak_plugin.analysis.census`.
"""

from __future__ import annotations

import dataclasses
import math

from tb_leak_plugin.analysis import hints as hints_lib
from tb_leak_plugin.analysis.trend import TrendResult

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
