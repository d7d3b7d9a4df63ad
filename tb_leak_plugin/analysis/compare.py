"""Two runs of the same job, side by side: did the change make it leak?

The series model (`analysis.trend`) gives each series its current growth
per step with a standard error widened for autocorrelated noise. The growth
of a series in the candidate run minus its growth in the base run is then
a difference of two independent estimates (the variances add; the
degrees of freedom are the smaller of the two, Hsu's conservative choice),
tested against the same
materiality a single run is judged by (the candidate's, from
`analysis.policy`):

- ``regression``: the difference's lower bound is above materiality
  (one-sided p < ``alpha_leak``, then Benjamini-Hochberg at ``run_fdr``
  across the compared series, as the run rule does);
- ``improvement``: its upper bound is below minus materiality, at the same
  level;
- ``no_regression``: its upper 95% bound is under materiality / the clean
  horizon, or the candidate series is itself certified ``no_leak`` (a
  series that does not grow cannot have regressed, whatever the base did);
- ``inconclusive`` otherwise, saying which bound failed.

The pair's verdict: ``regression`` when any series regressed;
``improvement`` when the base run leaked and the candidate does not, or a
memory series improved and none regressed; ``no_regression`` when the
candidate run is ``no_leak`` or every compared memory series is certified;
``inconclusive`` otherwise. Culprits are matched by kind and name: new in
the candidate, grown, or gone.

Pure: works on the report dicts (``RunReport.to_dict()``) the CLI and the
Leak tab both serve, so the two always agree.
"""

from __future__ import annotations

import math

from tb_leak_plugin.analysis._stats import t_ppf, t_sf
from tb_leak_plugin.analysis.policy import POLICY, Policy

#: Series roles whose growth is compared (context series are never judged).
COMPARED_ROLES = ("memory", "tensors", "objects", "traces", "gc")
VERDICT_ORDER = {"regression": 0, "inconclusive": 1, "no_regression": 2, "improvement": 3}
# Series are listed what changed first.
_SERIES_ORDER = {"regression": 0, "improvement": 1, "inconclusive": 2, "no_regression": 3}


def _finite(value) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _estimate(series: dict) -> tuple[float, float, float] | None:
    """(slope, standard error, degrees of freedom), or None when the series
    has no usable slope (too few samples)."""
    slope = _finite(series.get("slope_per_step"))
    se = _finite(series.get("slope_se"))
    df = _finite(series.get("slope_df"))
    if slope is None:
        return None
    if se is None:  # a report without the error: recover it from the 95% interval (normal, wider)
        ci = series.get("slope_ci") or (None, None)
        lo, hi = _finite(ci[0]), _finite(ci[1])
        if lo is None or hi is None:
            return None
        se, df = (hi - lo) / (2 * 1.959964), 1e6
    return slope, max(se, 0.0), max(df if df is not None else 1e6, 1.0)


def _p_above(d: float, se: float, df: float, bar: float) -> float:
    """One-sided p that the difference is at most ``bar``."""
    return t_sf((d - bar) / se, df) if se > 0 else float(d <= bar)


def _readings(series: dict, key: str) -> list:
    """The readings of a series' current segment that a claim must hold
    under (see `analysis.trend`): ``readings`` for a claim that it does not
    grow, ``leak_readings`` for a claim that it does. A report without them
    has its main estimate as its one reading."""
    raw = series.get(key)
    if raw is None:
        one = _estimate(series)
        return [one] if one else []
    out = []
    for item in raw if isinstance(raw, (list, tuple)) else ():
        try:
            b, se, df = (float(x) for x in item)
        except (TypeError, ValueError):
            continue
        if math.isfinite(b) and math.isfinite(se) and math.isfinite(df):
            out.append((b, max(se, 0.0), max(df, 1.0)))
    return out


def _p_difference(grows: list, other: list, bar: float) -> float:
    """One-sided p that (a reading of ``grows``) - (a reading of ``other``)
    is at most ``bar``, the largest over every pair of readings: the claim
    that it is above must hold under all of them. 1 when ``grows`` has no
    reading a growth claim may rest on."""
    if not grows or not other:
        return 1.0
    return max(_p_above(g - o, math.sqrt(gs * gs + os_ * os_), _welch_df(gs, gd, os_, od), bar)
               for g, gs, gd in grows for o, os_, od in other)


def _welch_df(s1: float, f1: float, s2: float, f2: float) -> float:
    """Degrees of freedom of the difference: Hsu's conservative choice, the
    smaller of the two. (Satterthwaite's weights each by its variance share,
    so a slope through four heap walks, whose error rests on one degree of
    freedom, counted for almost nothing beside a noisier base: a warm-up jump
    in the candidate read as a regression at p 3e-5, where the series model
    itself judged that reading on its one degree of freedom, p 0.006.)"""
    return min(f1, f2) if s1 * s1 + s2 * s2 > 0 else 1e6


def compare_series(base: dict, candidate: dict, policy: Policy = POLICY) -> dict:
    """The difference in growth of one series between two runs."""
    row = {"tag": candidate.get("tag"), "role": candidate.get("role"), "unit": candidate.get("unit"),
           "base_verdict": base.get("verdict"), "candidate_verdict": candidate.get("verdict"),
           "base_slope": _finite(base.get("slope_per_step")),
           "candidate_slope": _finite(candidate.get("slope_per_step")),
           "base_ci": _ci(base), "candidate_ci": _ci(candidate),
           "difference": None, "difference_ci": [None, None], "materiality": None,
           "p_regression": 1.0, "p_improvement": 1.0, "verdict": "not_compared", "reason": ""}
    one, two = _estimate(base), _estimate(candidate)
    if one is None or two is None:
        row["reason"] = "too few samples in " + ("both runs" if one is None and two is None
                                                  else "the base run" if one is None else "the candidate run")
        return row
    (b1, s1, f1), (b2, s2, f2) = one, two
    d, se, df = b2 - b1, math.sqrt(s1 * s1 + s2 * s2), _welch_df(s1, f1, s2, f2)
    material = _finite(candidate.get("materiality")) or _finite(base.get("materiality"))
    if material is None or material <= 0:
        row["reason"] = "no materiality to test against"
        return row
    half = t_ppf(0.975, df) * se
    # "The same" is held to what "no leak" is (a part of the process's
    # memory: its own level, see Policy.materiality).
    clean = _finite(candidate.get("clean_materiality")) or _finite(base.get("clean_materiality")) or material
    clean_bar = min(clean, material) / policy.clean_horizon
    base_all, cand_all = _readings(base, "readings"), _readings(candidate, "readings")
    # Regression: the candidate grows more than the base by more than
    # materiality under every reading; improvement the other way round; the
    # same: the difference is under a third of materiality under every reading.
    p_reg = _p_difference(_readings(candidate, "leak_readings"), base_all, material)
    p_imp = _p_difference(_readings(base, "leak_readings"), cand_all, material)
    p_same = max((1.0 - _p_difference([c], [b], clean_bar) for c in cand_all for b in base_all), default=1.0)
    certified = candidate.get("verdict") == "no_leak"
    if certified:
        p_reg = 1.0
    row.update(difference=d, difference_ci=[d - half, d + half], materiality=material,
               p_regression=p_reg, p_improvement=p_imp, p_same=p_same)
    if p_imp < policy.alpha_leak:
        row["verdict"], row["reason"] = "improvement", "grows less than in the base run"
    elif p_reg < policy.alpha_leak:
        row["verdict"], row["reason"] = "regression", "grows more than in the base run"
    elif certified or p_same < policy.alpha_clean:
        row["verdict"] = "no_regression"
        row["reason"] = ("certified no_leak in the candidate run" if certified
                         else "the difference is bounded under a third of materiality (95%)")
    else:
        row["verdict"] = "inconclusive"
        row["reason"] = ("growth difference not yet shown above materiality" if d > clean_bar
                         else "growth difference not yet bounded under a third of materiality")
    return row


def _ci(series: dict) -> list:
    ci = series.get("slope_ci") or (None, None)
    return [_finite(ci[0]), _finite(ci[1])]


def _benjamini_hochberg(rows: list, policy: Policy) -> None:
    """Regressions kept at the run's false-discovery rate across the compared series."""
    tested = sorted((r for r in rows if r["verdict"] == "regression"), key=lambda r: r["p_regression"])
    m = max(1, sum(r["verdict"] != "not_compared" for r in rows))
    keep = 0
    for rank, row in enumerate(tested, 1):
        if row["p_regression"] <= policy.run_fdr * rank / m:
            keep = rank
    for row in tested[keep:]:
        row["verdict"] = "inconclusive"
        row["reason"] = "a regression that does not survive the false-discovery control across series"


def compare_culprits(base: list, candidate: list, rows: list) -> list:
    """Culprits of the candidate that are new or grew, then the base's that
    are gone. A culprit in both runs "grew" when the series it is named
    after regressed (the same test as the series table), else it is
    "in_both"."""
    def key(c):
        return (c.get("kind"), c.get("name"))

    def regressed(name) -> bool:
        return any(r["verdict"] == "regression" and (r["tag"] == name or str(r["tag"]).endswith("/" + str(name)))
                   for r in rows)

    before = {key(c): c for c in base or ()}
    after = {key(c): c for c in candidate or ()}
    out = []
    for k, c in after.items():
        old = before.get(k)
        status = "new" if old is None else "grew" if regressed(c.get("name")) else "in_both"
        out.append({"kind": c.get("kind"), "name": c.get("name"), "unit": c.get("unit"), "status": status,
                    "base_growth": _finite(old.get("growth_per_step")) if old else None,
                    "candidate_growth": _finite(c.get("growth_per_step"))})
    for k, c in before.items():
        if k not in after:
            out.append({"kind": c.get("kind"), "name": c.get("name"), "unit": c.get("unit"), "status": "gone",
                        "base_growth": _finite(c.get("growth_per_step")), "candidate_growth": None})
    order = {"new": 0, "grew": 1, "gone": 2, "in_both": 3}
    return sorted(out, key=lambda r: order[r["status"]])


def compare_runs(base: dict, candidate: dict, policy: Policy = POLICY) -> dict:
    """The verdict on the difference between two run reports."""
    base_series = {s.get("tag"): s for s in base.get("series", ()) if s.get("role") in COMPARED_ROLES}
    cand_series = {s.get("tag"): s for s in candidate.get("series", ()) if s.get("role") in COMPARED_ROLES}
    rows = [compare_series(base_series[tag], cand_series[tag], policy)
            for tag in cand_series if tag in base_series]
    _benjamini_hochberg(rows, policy)
    rows.sort(key=lambda r: (_SERIES_ORDER.get(r["verdict"], 4), COMPARED_ROLES.index(r["role"])
                             if r["role"] in COMPARED_ROLES else 9, r["tag"] or ""))
    primary = _primary(base, candidate, rows)
    verdict, reason = _pair_verdict(base, candidate, rows, primary)
    only = sorted(set(cand_series) - set(base_series)), sorted(set(base_series) - set(cand_series))
    return {
        "base": base.get("run"), "candidate": candidate.get("run"),
        "verdict": verdict, "reason": reason,
        "base_verdict": base.get("verdict"), "candidate_verdict": candidate.get("verdict"),
        "primary": primary,
        "series": rows,
        "culprits": compare_culprits(base.get("culprits"), candidate.get("culprits"), rows),
        "only_in_candidate": only[0], "only_in_base": only[1],
    }


def _primary(base: dict, candidate: dict, rows: list) -> dict | None:
    """The memory series the pair is summed up by: the candidate's primary
    one when both runs have it, else the first compared memory series."""
    by_tag = {r["tag"]: r for r in rows}
    for tag in (candidate.get("primary_tag"), base.get("primary_tag")):
        if tag in by_tag and by_tag[tag]["difference"] is not None:
            return by_tag[tag]
    memory = [r for r in rows if r["role"] == "memory" and r["difference"] is not None]
    return memory[0] if memory else None


def _pair_verdict(base: dict, candidate: dict, rows: list, primary: dict | None) -> tuple[str, str]:
    regressed = [r for r in rows if r["verdict"] == "regression"]
    memory = [r for r in rows if r["role"] == "memory" and r["verdict"] != "not_compared"]
    b_verdict, c_verdict = base.get("verdict"), candidate.get("verdict")
    if regressed:
        names = ", ".join(r["tag"] for r in regressed[:3]) + (" and more" if len(regressed) > 3 else "")
        return "regression", f"grows more than the base run: {names}"
    # The run verdicts compose: growth certified below materiality in one run
    # and shown above it in the other is a difference, whichever series
    # showed it (a heap-walk series the other run walked too seldom to
    # compare included).
    if b_verdict == "leak" and c_verdict == "no_leak":
        return "improvement", f"the base run leaks and the candidate is {c_verdict}"
    if b_verdict == "no_leak" and c_verdict == "leak":
        return "regression", "the base run is certified no_leak and the candidate leaks"
    improved = [r for r in memory if r["verdict"] == "improvement"]
    certified = all(r["verdict"] in ("no_regression", "improvement") for r in memory) and memory
    if improved and certified:
        return "improvement", "memory grows less than in the base run, and nowhere more"
    if c_verdict == "no_leak":
        return "no_regression", "the candidate run is certified no_leak"
    if certified:
        still = {"leak": "; both runs leak"}.get(b_verdict, f"; the candidate leaks (the base run is {b_verdict})") \
            if c_verdict == "leak" else ""
        return "no_regression", f"every memory series grows within materiality of the base run{still}"
    if not memory:
        return "inconclusive", "the two runs share no judged memory series"
    open_ = [r["tag"] for r in memory if r["verdict"] not in ("no_regression", "improvement")]
    return "inconclusive", f"not yet decided for {', '.join(open_[:3])}{' and more' if len(open_) > 3 else ''}"
