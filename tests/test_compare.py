"""`tb-leak compare BASE CANDIDATE`: the verdict on a difference in growth.

The decision is tested on series estimates (pure, exact) and end to end on
logdirs written with the TF-free EventWriter from seeded synthetic series;
the demo's real TensorFlow runs are compared in tests/test_demo_e2e.py and
in the Leak tab in tests/test_browser.py.
"""

import json
import math

import pytest

from tb_leak_plugin.analysis import compare
from tb_leak_plugin.analysis.policy import POLICY
from tb_leak_plugin.reporting import cli
from tb_leak_plugin.reporting import compare as compare_text

from test_cli import write_run


def series(slope, se, verdict="inconclusive", materiality=1000.0, tag="leak/process/rss_bytes", role="memory",
           df=50.0, unit="bytes"):
    half = 2.0 * se
    return {"tag": tag, "role": role, "unit": unit, "verdict": verdict, "slope_per_step": slope,
            "slope_se": se, "slope_df": df, "slope_ci": [slope - half, slope + half], "materiality": materiality}


@pytest.mark.parametrize("base_slope", [-500.0, 0.0, 300.0, 2000.0])
def test_more_growth_in_the_candidate_never_looks_better(base_slope):
    order = {"improvement": 0, "no_regression": 1, "inconclusive": 2, "regression": 3}
    ranks = [order[compare.compare_series(series(base_slope, 50.0), series(base_slope + extra, 50.0))["verdict"]]
             for extra in [-3000, -1000, -100, 0, 100, 300, 1000, 1500, 3000, 10000]]
    assert ranks == sorted(ranks), ranks
    assert ranks[0] == order["improvement"] and ranks[-1] == order["regression"]


def test_the_difference_adds_the_variances_on_the_smaller_degrees_of_freedom():
    from tb_leak_plugin.analysis._stats import t_ppf

    row = compare.compare_series(series(100.0, 30.0, df=20), series(400.0, 40.0, df=30))
    assert row["difference"] == pytest.approx(300.0)
    lo, hi = row["difference_ci"]
    assert (hi - lo) / 2 == pytest.approx(t_ppf(0.975, 20) * 50.0)  # se 50 on Hsu's 20 df


def test_a_slope_on_one_degree_of_freedom_is_no_regression_beside_a_noisier_base():
    # A fixed twin's object count at four heap walks: a warm-up jump at the
    # first, then flat; its line besides a one-off shift has one residual
    # degree of freedom (the series model: p 0.006, inconclusive). Beside a
    # base whose error is larger but rests on 50, Satterthwaite's degrees of
    # freedom (~60) called it a regression at p 3e-5.
    base = series(-0.0023, 0.0043, materiality=0.001, tag="leak/objects/builtins.tuple", role="objects",
                  unit="count", df=50.0)
    candidate = series(0.0877, 0.0016, materiality=0.001, tag="leak/objects/builtins.tuple", role="objects",
                       unit="count", df=1.0)
    row = compare.compare_series(base, candidate)
    assert row["verdict"] != "regression", row
    assert row["p_regression"] > POLICY.alpha_leak


def test_scaling_both_runs_scales_the_difference_and_keeps_the_verdict():
    base, cand = series(100.0, 30.0), series(1800.0, 60.0)
    one = compare.compare_series(base, cand)
    scaled = compare.compare_series(*(dict(s, slope_per_step=s["slope_per_step"] * 1000, slope_se=s["slope_se"] * 1000,
                                           materiality=s["materiality"] * 1000) for s in (base, cand)))
    assert one["verdict"] == scaled["verdict"] == "regression"
    assert scaled["difference"] == pytest.approx(one["difference"] * 1000)


def test_a_certified_candidate_has_not_regressed_whatever_the_base_did():
    # The base shrank (a cache being emptied); the candidate is flat and certified.
    row = compare.compare_series(series(-5000.0, 10.0, verdict="inconclusive"), series(5.0, 10.0, verdict="no_leak"))
    assert row["verdict"] == "no_regression"


def test_noisy_estimates_are_inconclusive_and_say_which_bound_failed():
    row = compare.compare_series(series(0.0, 800.0), series(900.0, 800.0))
    assert row["verdict"] == "inconclusive"
    assert "not yet shown above materiality" in row["reason"]
    row = compare.compare_series(series(0.0, 800.0), series(0.0, 800.0))
    assert row["verdict"] == "inconclusive" and "not yet bounded" in row["reason"]


def test_a_series_without_a_slope_is_not_compared():
    row = compare.compare_series(series(math.nan, math.nan), series(10.0, 1.0))
    assert row["verdict"] == "not_compared" and "base run" in row["reason"]


def test_one_regressing_series_among_many_noise_series_survives_the_false_discovery_control():
    base = {"run": "a", "verdict": "no_leak", "series": [series(0.0, 50.0, tag=f"leak/objects/t{i}", role="objects")
                                                         for i in range(40)], "culprits": []}
    cand = json.loads(json.dumps(base))
    cand["verdict"] = "leak"
    cand["series"][7] = series(5000.0, 50.0, tag="leak/objects/t7", role="objects")
    result = compare.compare_runs(base, cand)
    assert result["verdict"] == "regression"
    assert [r["tag"] for r in result["series"] if r["verdict"] == "regression"] == ["leak/objects/t7"]


def test_run_verdicts_compose_whatever_series_each_run_could_estimate():
    # The fixed run's heap walks were too few for a slope of its tensor
    # count; its memory is certified flat. The leaky run leaks through the
    # tensor count, and its memory series are still undecided: no series
    # difference is decided, but the run verdicts are (as leak -> no_leak is
    # an improvement).
    tensors = dict(tag="leak/tensors/eager_count", role="tensors", unit="count", materiality=0.01)
    base = {"run": "fixed", "verdict": "no_leak", "culprits": [],
            "series": [series(0.0, 1.0, verdict="no_leak"), series(math.nan, math.nan, **tensors)]}
    cand = {"run": "leaky", "verdict": "leak", "culprits": [],
            "series": [series(2000.0, 900.0, df=3), series(1.0, 1e-9, verdict="leak", **tensors)]}
    forward, backward = compare.compare_runs(base, cand), compare.compare_runs(cand, base)
    assert forward["verdict"] == "regression" and "certified no_leak" in forward["reason"], forward["reason"]
    assert backward["verdict"] == "improvement", backward["reason"]
    # An undecided base: a leaky candidate within materiality of it is not
    # said to be where "both runs leak".
    base["verdict"] = "inconclusive"
    cand["series"][0] = series(0.0, 1.0)
    result = compare.compare_runs(base, cand)
    assert "both runs leak" not in result["reason"]


def test_a_weak_regression_among_many_series_is_held_back():
    rows = [dict(verdict="regression", p_regression=5e-5, tag="a", role="objects")] + [
        dict(verdict="no_regression", p_regression=0.5, tag=f"b{i}", role="objects") for i in range(999)]
    compare._benjamini_hochberg(rows, POLICY)
    assert rows[0]["verdict"] == "inconclusive"


def test_culprits_new_grown_and_gone():
    base = [{"kind": "object_type", "name": "A", "growth_per_step": 1.0, "unit": "objects"},
            {"kind": "object_type", "name": "B", "growth_per_step": 1.0, "unit": "objects"}]
    cand = [{"kind": "object_type", "name": "A", "growth_per_step": 5.0, "unit": "objects"},
            {"kind": "object_type", "name": "C", "growth_per_step": 2.0, "unit": "objects"}]
    rows = [{"tag": "leak/objects/A", "verdict": "regression"}]
    statuses = {c["name"]: c["status"] for c in compare.compare_culprits(base, cand, rows)}
    assert statuses == {"A": "grew", "B": "gone", "C": "new"}
    statuses = {c["name"]: c["status"] for c in compare.compare_culprits(base, cand, [])}
    assert statuses["A"] == "in_both"  # grown in number but not shown to regress


# ---------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def two_logdirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    write_run(str(root / "before" / "fixed"), False, seed=1)
    write_run(str(root / "before" / "leaky"), True, seed=2)
    write_run(str(root / "after" / "fixed"), False, seed=3)
    write_run(str(root / "after" / "leaky"), True, seed=4)
    return root


def _json(capsys, *argv):
    status = cli.main(["compare", *map(str, argv), "--format", "json", "--fail-on-regression"])
    return status, json.loads(capsys.readouterr().out)


def test_a_leaky_candidate_against_its_fixed_base_regresses_and_fails_ci(two_logdirs, capsys):
    status, report = _json(capsys, two_logdirs / "before" / "fixed", two_logdirs / "after" / "leaky")
    assert status == cli.EXIT_LEAK
    (pair,) = report["pairs"]
    assert pair["verdict"] == "regression"
    assert pair["primary"]["tag"] == "leak/process/rss_bytes"
    assert pair["primary"]["difference_ci"][0] > 250_000  # the synthetic leak adds 300,000 B/step
    assert {"new"} <= {c["status"] for c in pair["culprits"]}


def test_the_fix_is_an_improvement(two_logdirs, capsys):
    status, report = _json(capsys, two_logdirs / "before" / "leaky", two_logdirs / "after" / "fixed")
    assert status == cli.EXIT_OK
    assert report["pairs"][0]["verdict"] == "improvement"
    assert {c["status"] for c in report["pairs"][0]["culprits"]} == {"gone"}


def test_two_runs_of_the_same_loop_do_not_regress(two_logdirs, capsys):
    status, report = _json(capsys, two_logdirs / "before" / "fixed", two_logdirs / "after" / "fixed")
    assert status == cli.EXIT_OK
    assert report["pairs"][0]["verdict"] == "no_regression"


def test_logdirs_are_compared_run_by_run(two_logdirs, capsys):
    status, report = _json(capsys, two_logdirs / "before", two_logdirs / "after")
    assert status == cli.EXIT_OK
    assert {p["base"].rsplit("/", 1)[1]: p["verdict"] for p in report["pairs"]} == {
        "fixed": "no_regression", "leaky": "no_regression"}


def test_text_says_which_grows_and_by_how_much(two_logdirs, capsys):
    status = cli.main(["compare", str(two_logdirs / "before" / "fixed"), str(two_logdirs / "after" / "leaky")])
    out = capsys.readouterr().out
    assert status == cli.EXIT_OK  # no --fail-on-regression
    assert "REGRESSION" in out and "KiB/step more in the candidate" in out


def test_runs_that_cannot_be_paired_are_a_usage_error(two_logdirs, capsys, tmp_path):
    status = cli.main(["compare", str(two_logdirs / "before"), str(two_logdirs / "after" / "fixed")])
    assert status == cli.EXIT_USAGE
    assert "no run name in common" in capsys.readouterr().err
    status = cli.main(["compare", str(two_logdirs / "before"), str(tmp_path / "missing")])
    assert status == cli.EXIT_USAGE
    assert "does not exist" in capsys.readouterr().err


def test_hostile_names_are_inert_in_text_and_markdown(tmp_path, capsys):
    for side in ("a", "b"):
        write_run(str(tmp_path / side / "run\x1b[31m*[x](http://e)*"), side == "b", seed=5)
    cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    text = capsys.readouterr().out
    assert "\x1b" not in text and "\\x1b" in text
    cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "markdown"])
    markdown = capsys.readouterr().out
    assert "[x](http" not in markdown and "\\[x\\]" in markdown


def test_pairing_reports_unmatched_runs():
    a = {"logdir": "A", "runs": [{"run": "x"}, {"run": "y"}], "warnings": []}
    b = {"logdir": "B", "runs": [{"run": "y"}, {"run": "z"}], "warnings": []}
    pairs, warnings = compare_text.pair_reports(a, b)
    assert [p[0]["run"] for p in pairs] == ["y"]
    assert warnings == ["only in BASE, not compared: x", "only in CANDIDATE, not compared: z"]


def test_a_regression_must_hold_under_every_reading_the_candidate_leak_must():
    # The candidate's main reading grows clearly, but with its last sample
    # left out (a reading a leak claim must also survive) it does not: as a
    # run it is not a leak, so against a flat base it is not a regression.
    cand = series(5000.0, 50.0)
    cand["leak_readings"] = [[5000.0, 50.0, 50.0], [800.0, 900.0, 3.0]]
    assert compare.compare_series(series(0.0, 50.0), cand)["verdict"] != "regression"
    cand["leak_readings"] = [[5000.0, 50.0, 50.0], [4900.0, 60.0, 40.0]]
    assert compare.compare_series(series(0.0, 50.0), cand)["verdict"] == "regression"
    cand["leak_readings"] = []  # a buffer refilling: no growth claim at all
    assert compare.compare_series(series(0.0, 50.0), cand)["verdict"] != "regression"
