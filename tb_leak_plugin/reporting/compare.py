"""``tb-leak compare BASE CANDIDATE``: the same job before and after a change.

BASE and CANDIDATE are each a run directory or a logdir. Two single runs
are compared with each other; two logdirs are compared run by run, pairing
runs of the same name (runs in only one of them are listed, not judged).
The verdict on each pair comes from :mod:`tb_leak_plugin.analysis.compare`,
the same function the Leak tab's Compare view calls.
"""

from __future__ import annotations

from tb_leak_plugin.analysis import compare as compare_lib
from tb_leak_plugin.units import format_bytes, printable

LABEL = {"regression": "REGRESSION", "no_regression": "no regression", "improvement": "improvement",
         "inconclusive": "inconclusive"}


class PairingError(ValueError):
    """The two sides hold no runs that can be paired."""


def pair_reports(base, candidate) -> tuple[list[tuple[dict, dict]], list[str]]:
    """Pairs of run reports (base, candidate) and warnings about runs left unpaired.

    ``base`` and ``candidate`` are ``LogdirReport.to_dict()`` results."""
    one, two = base["runs"], candidate["runs"]
    if not one or not two:
        empty = "BASE" if not one else "CANDIDATE"
        raise PairingError(f"{empty} ({base['logdir'] if not one else candidate['logdir']!r}) holds no runs")
    if len(one) == 1 and len(two) == 1:
        return [(one[0], two[0])], []
    by_name = {r["run"]: r for r in one}
    pairs = [(by_name[r["run"]], r) for r in two if r["run"] in by_name]
    if not pairs:
        raise PairingError(
            f"BASE has {len(one)} runs and CANDIDATE {len(two)}, with no run name in common: give two run "
            "directories, or two logdirs whose runs have the same names (or select runs with --run)")
    names = {r["run"] for r in two}
    warnings = [f"only in BASE, not compared: {r['run']}" for r in one if r["run"] not in names]
    warnings += [f"only in CANDIDATE, not compared: {r['run']}" for r in two if r["run"] not in by_name]
    return sorted(pairs, key=lambda p: p[1]["run"]), warnings


def compare_logdirs(base, candidate) -> dict:
    """The comparison report of two ``LogdirReport.to_dict()`` results."""
    pairs, warnings = pair_reports(base, candidate)
    results = []
    for one, two in pairs:
        result = compare_lib.compare_runs(one, two)
        result["base"] = _display(base["logdir"], one["run"])
        result["candidate"] = _display(candidate["logdir"], two["run"])
        results.append(result)
    results.sort(key=lambda r: compare_lib.VERDICT_ORDER.get(r["verdict"], 9))
    return {"base": base["logdir"], "candidate": candidate["logdir"], "pairs": results,
            "warnings": list(base.get("warnings", ())) + list(candidate.get("warnings", ())) + warnings}


def _display(logdir: str, run: str) -> str:
    return logdir if run in (".", "") else f"{logdir.rstrip('/')}/{run}"


def any_regression(report: dict) -> bool:
    return any(p["verdict"] == "regression" for p in report["pairs"])


def _amount(value, unit, signed=True) -> str:
    if value is None:
        return "-"
    if abs(value) < 1e-9 * (1 << 20 if unit == "bytes" else 1):  # rounding residue of an exact fit
        value = 0.0
    if unit == "bytes":
        return format_bytes(value, signed)
    return (f"{value:+.3g}" if signed else f"{value:.3g}") + f" {unit}"


def _range(ci, unit) -> str:
    lo, hi = ci if ci else (None, None)
    if lo is None or hi is None:
        return "-"
    return f"{_amount(lo, unit)} .. {_amount(hi, unit)}"


def headline(pair: dict) -> str:
    """One sentence: which run grows more, and by how much per step."""
    primary = pair.get("primary")
    if primary is None or primary["difference"] is None:
        return "no memory series to compare"
    unit = primary["unit"]
    d = primary["difference"]
    direction = "more" if d > 0 else "less"
    return (f"{primary['tag']} grows {_amount(abs(d), unit, False)}/step {direction} in the candidate "
            f"(95% CI {_range(primary['difference_ci'], unit)}; base {_amount(primary['base_slope'], unit)}/step, "
            f"candidate {_amount(primary['candidate_slope'], unit)}/step)")


def format_text(report: dict) -> str:
    lines = [f"tb-leak compare: {report['base']} -> {report['candidate']}"]
    lines += [f"warning: {w}" for w in report["warnings"]]
    for pair in report["pairs"]:
        lines += ["", f"{LABEL.get(pair['verdict'], pair['verdict'])}: {pair['base']} -> {pair['candidate']}",
                  f"  {pair['reason']}",
                  f"  runs: base {pair['base_verdict']}, candidate {pair['candidate_verdict']}",
                  f"  {headline(pair)}"]
        shown = [r for r in pair["series"] if r["verdict"] != "not_compared"]
        if shown:
            lines.append(f"  {'series':<44} {'base /step':>14} {'candidate /step':>16} "
                         f"{'difference (95% CI)':>34}  verdict")
            for row in shown[:12]:
                unit = row["unit"]
                diff = f"{_amount(row['difference'], unit)} ({_range(row['difference_ci'], unit)})"
                lines.append(f"  {_cut(row['tag'], 44):<44} {_amount(row['base_slope'], unit):>14} "
                             f"{_amount(row['candidate_slope'], unit):>16} {diff:>34}  "
                             f"{LABEL.get(row['verdict'], row['verdict'])}")
            if len(shown) > 12:
                lines.append(f"  ... {len(shown) - 12} more series (--format json lists all)")
        changed = [c for c in pair["culprits"] if c["status"] in ("new", "grew", "gone")]
        for culprit in changed[:8]:
            lines.append(f"  culprit {culprit['status']}: {culprit['kind']} {_cut(culprit['name'], 60)} "
                         f"({_amount(culprit['base_growth'], culprit['unit'])} -> "
                         f"{_amount(culprit['candidate_growth'], culprit['unit'])} per step)")
    return "\n".join(printable(line) for line in lines) + "\n"


def format_markdown(report: dict, escape) -> str:
    lines = [f"## tb-leak compare: {escape(report['base'])} → {escape(report['candidate'])}", ""]
    lines += [f"> warning: {escape(w)}" for w in report["warnings"]]
    lines += ["| base | candidate | verdict | memory growth difference / step | new or grown culprits |",
              "|---|---|---|---|---|"]
    for pair in report["pairs"]:
        icon = {"regression": "🔴", "improvement": "🟢", "no_regression": "🟢"}.get(pair["verdict"], "⚪")
        primary = pair.get("primary")
        diff = (f"{_amount(primary['difference'], primary['unit'])} ({_range(primary['difference_ci'], primary['unit'])})"
                if primary and primary["difference"] is not None else "-")
        grown = ", ".join(f"{escape(c['name'])} ({c['status']})" for c in pair["culprits"]
                          if c["status"] in ("new", "grew"))[:300]
        lines.append(f"| {escape(pair['base'])} | {escape(pair['candidate'])} | {icon} "
                     f"{LABEL.get(pair['verdict'], pair['verdict'])} | {escape(diff)} | {grown} |")
    for pair in report["pairs"]:
        lines += ["", f"### {escape(pair['candidate'])}", "", escape(pair["reason"]) + ". " + escape(headline(pair))]
    return "\n".join(printable(line) for line in lines) + "\n"


def _cut(text, width: int) -> str:
    text = printable(text)
    return text if len(text) <= width else text[: width - 1] + "…"
