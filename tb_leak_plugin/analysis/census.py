"""Census -> growing object types, with a correction for testing many at once.

A run follows up to dozens of types; testing each at a fixed level would
flag some by chance. Types are kept only when their trend says ``leak`` and
their p-value survives Benjamini-Hochberg at ``FALSE_DISCOVERY_RATE``.
"""

from __future__ import annotations

import numpy as np

from tb_leak_plugin.analysis import hints as hints_lib
from tb_leak_plugin.analysis.results import Culprit

FALSE_DISCOVERY_RATE = 0.01


def benjamini_hochberg(p_values, rate: float = FALSE_DISCOVERY_RATE) -> np.ndarray:
    """Boolean mask of the hypotheses rejected at false-discovery ``rate``."""
    p = np.asarray(p_values, dtype=np.float64)
    n = p.size
    if n == 0:
        return np.zeros(0, dtype=bool)
    p = np.where(np.isfinite(p), p, 1.0)
    order = np.argsort(p, kind="stable")
    thresholds = rate * np.arange(1, n + 1) / n
    passed = p[order] <= thresholds
    rejected = np.zeros(n, dtype=bool)
    if passed.any():
        last = int(np.nonzero(passed)[0].max())
        rejected[order[: last + 1]] = True
    return rejected


def object_culprits(reports) -> list:
    """Culprits of kind ``object_type`` from object-count series reports.

    ``reports`` are ``SeriesReport``s of live-object counts (per type, and
    the total of tracked objects). Returns culprits ranked by the caller.
    """
    judged = [r for r in reports if r.trend is not None]
    if not judged:
        return []
    rejected = benjamini_hochberg([r.trend.p_value for r in judged])
    culprits = []
    for report, significant in zip(judged, rejected):
        if not significant or report.trend.verdict != "leak":
            continue
        if report.group == "gc":  # total of tracked objects: evidence, no type to name
            culprits.append(Culprit(
                kind="object_type", name="all gc-tracked objects", growth_per_step=report.trend.slope_per_step,
                unit="objects", evidence=report.trend.reason, confidence=report.trend.confidence * 0.9,
                hint=None, details={"tag": report.tag},
            ))
            continue
        hint = hints_lib.hint_for_type(report.subject)
        culprits.append(Culprit(
            kind="object_type", name=report.subject, growth_per_step=report.trend.slope_per_step,
            unit="objects", evidence=report.trend.reason, confidence=report.trend.confidence,
            hint=hint.key, details={"tag": report.tag, "last_count": report.last_value},
        ))
    return culprits
