#!/usr/bin/env python
"""Run the held-out leak corpus and score ``tb-leak analyze`` against it.

Every scenario file in this directory (``sNN_*.py``) defines ``leaky`` and
``fixed`` training loops (or ``leaky_fit`` / ``fixed_fit`` for ``model.fit`` with
``LeakCallback``), ``STEPS``, ``SLICE`` and ``EXPECT``. Each variant runs in a fresh
interpreter and writes ``<logdir>/<scenario>/<variant>``; then
``python -m tb_leak_plugin analyze <logdir> --format json`` judges the runs and
this script scores them against ``EXPECT`` (``verdict`` / ``verdict_not``,
``culprit_any`` in the top 3 culprits and, when given, ``holder_any`` in the
first ``held_by`` path of one of them, totalled as "holder named").

    python benchmarks/heldout/run_heldout.py                  # everything
    python benchmarks/heldout/run_heldout.py --slice tune     # only the tuning slice
    python benchmarks/heldout/run_heldout.py --only s05 --show-holdout

It is a benchmark, not a test: it always exits 0.
"""
import argparse
import concurrent.futures
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = ("leaky", "fixed")


# --------------------------------------------------------------------------- child

def _load(path):
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _child(path, variant, rundir, steps):
    """Run one variant of one scenario (in its own interpreter)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    mod = _load(path)                                   # the scenario imports TF (or not) here
    steps = int(steps) if steps else int(mod.STEPS)
    fit = getattr(mod, variant + "_fit", None)
    if fit is not None:
        fit(rundir, steps)
        return
    import tb_leak_plugin
    monitor = tb_leak_plugin.Monitor(rundir)
    try:
        getattr(mod, variant)(monitor, steps)
    finally:
        monitor.close()


# --------------------------------------------------------------------------- parent

def _scenario_meta(path):
    """SLICE / STEPS / EXPECT / SOURCE without importing the module (no TF start-up)."""
    import ast
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    meta = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            key = node.targets[0].id
            if key in ("SLICE", "STEPS", "EXPECT", "SOURCE"):
                try:
                    meta[key] = ast.literal_eval(node.value)
                except ValueError:
                    pass
    return meta


def _scenario_number(path):
    return int(re.match(r"s(\d+)_", os.path.basename(path)).group(1))


def _discover():
    out = []
    paths = [p for p in glob.glob(os.path.join(HERE, "s[0-9]*_*.py"))
             if re.match(r"s\d{2,3}_", os.path.basename(p))]            # s01 ... s99, s100 ...
    for path in sorted(paths, key=_scenario_number):
        meta = _scenario_meta(path)
        meta["name"] = os.path.splitext(os.path.basename(path))[0]
        meta["path"] = path
        out.append(meta)
    return out


def _run_variant(scn, variant, logdir, timeout, steps):
    rundir = os.path.join(logdir, scn["name"], variant)
    if os.path.isdir(rundir):
        shutil.rmtree(rundir)
    os.makedirs(rundir, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONHASHSEED"] = "0"
    cmd = [sys.executable, os.path.abspath(__file__), "--child", scn["path"], variant, rundir, str(steps or "")]
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        rc, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, err = "timeout", (exc.stderr or b"").decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    wall = time.time() - t0
    return {"scenario": scn["name"], "variant": variant, "rc": rc, "wall": wall,
            "stderr_tail": "" if rc == 0 else "\n".join((err or "").strip().splitlines()[-8:])}


def _analyze(logdir):
    cmd = [sys.executable, "-m", "tb_leak_plugin", "analyze", logdir, "--format", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print("tb-leak analyze failed (rc=%s): %s" % (proc.returncode, proc.stderr.strip()[-2000:]))
        return {}
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        print("tb-leak analyze did not print JSON:", proc.stdout[:500])
        return {}
    runs = {}
    for run in report.get("runs", []):
        runs[run.get("run", "").replace(os.sep, "/").strip("/")] = run
    return runs


def _culprit_text(culprit):
    return " | ".join(str(culprit.get(k, "")) for k in ("name", "kind", "hint"))


def _first_held_by_path(culprit):
    """The culprit's first leak-trace path as one string ("" if it has none).

    ``held_by`` is read at the culprit's top level or under ``details``; a path
    is a list of hops (joined with " -> ") or, tolerated, a single string.
    """
    if not isinstance(culprit, dict):
        return ""
    details = culprit.get("details") if isinstance(culprit.get("details"), dict) else {}
    for held in (culprit.get("held_by"), details.get("held_by")):
        if isinstance(held, dict):
            held = [held]
        if not isinstance(held, list) or not held:
            continue
        first = held[0]
        path = first.get("path") if isinstance(first, dict) else first
        if isinstance(path, (list, tuple)):
            text = " -> ".join(str(hop) for hop in path)
        elif path is not None:
            text = str(path)
        else:
            text = ""
        if text:
            return text
    return ""


def _score(expect, run, status):
    """Returns (verdict, verdict_ok, culprit_ok or None, holder_ok or None, top3 names, top3 first paths)."""
    culprit_missing = False if "culprit_any" in expect else None
    holder_missing = False if "holder_any" in expect else None
    if status != 0:
        return ("error" if status != "timeout" else "timeout"), False, culprit_missing, holder_missing, [], []
    if run is None:
        return "missing", False, culprit_missing, holder_missing, [], []
    verdict = run.get("verdict", "?")
    ok = True
    if "verdict" in expect:
        ok = ok and verdict == expect["verdict"]
    if "verdict_not" in expect:
        ok = ok and verdict != expect["verdict_not"]
    top = list(run.get("culprits") or [])[:3]
    culprit_ok = None
    if "culprit_any" in expect:
        text = " || ".join(_culprit_text(c) for c in top).lower()
        culprit_ok = any(s.lower() in text for s in expect["culprit_any"])
    paths = [_first_held_by_path(c) for c in top]
    holder_ok = None
    if "holder_any" in expect:
        holder_ok = any(s.lower() in path.lower() for path in paths if path for s in expect["holder_any"])
    return verdict, ok, culprit_ok, holder_ok, [str(c.get("name", "?")) for c in top], paths


def _totals(rows):
    leaky = [r for r in rows if r["variant"] == "leaky"]
    fixed = [r for r in rows if r["variant"] == "fixed"]
    return {
        "leaky_runs": len(leaky),
        "leaks_caught": sum(r["verdict"] == "leak" for r in leaky),
        "right_culprit_top3": sum(r["verdict"] == "leak" and bool(r["culprit_ok"]) for r in leaky),
        "holder_runs": sum(r.get("holder_ok") is not None for r in leaky),
        "holder_named": sum(r["verdict"] == "leak" and bool(r.get("holder_ok")) for r in leaky),
        "leaky_inconclusive": sum(r["verdict"] == "inconclusive" for r in leaky),
        "fixed_runs": len(fixed),
        "false_alarms": sum(r["verdict"] == "leak" for r in fixed),
        "fixed_inconclusive": sum(r["verdict"] == "inconclusive" for r in fixed),
        "errors": sum(r["verdict"] in ("error", "timeout", "missing") for r in rows),
        "passed": sum(r["pass"] for r in rows),
        "runs": len(rows),
    }


def _print_totals(label, t):
    holder = (", holder named %d/%d" % (t["holder_named"], t["holder_runs"])) if t.get("holder_runs") else ""
    print("%-8s leaks caught %d/%d, right culprit in top 3 %d/%d%s, leaky inconclusive %d | "
          "false alarms %d/%d, fixed inconclusive %d | errors %d | passed %d/%d"
          % (label, t["leaks_caught"], t["leaky_runs"], t["right_culprit_top3"], t["leaky_runs"], holder,
             t["leaky_inconclusive"], t["false_alarms"], t["fixed_runs"], t["fixed_inconclusive"],
             t["errors"], t["passed"], t["runs"]))


def _print_table(rows):
    head = ("scenario", "slice", "variant", "verdict", "top-3 culprits", "culprit", "holder", "pass", "wall s")
    print("%-36s %-8s %-6s %-12s %-70s %-7s %-6s %-4s %6s" % head)
    print("-" * 166)
    for r in rows:
        names = ", ".join(r["top3"]) or "-"
        if len(names) > 70:
            names = names[:67] + "..."
        cul = "-" if r["culprit_ok"] is None else ("yes" if r["culprit_ok"] else "no")
        hold = "-" if r.get("holder_ok") is None else ("yes" if r["holder_ok"] else "no")
        print("%-36s %-8s %-6s %-12s %-70s %-7s %-6s %-4s %6.1f"
              % (r["scenario"], r["slice"], r["variant"], r["verdict"], names, cul, hold,
                 "PASS" if r["pass"] else "FAIL", r["wall"]))
        if r.get("holder_ok") is not None:
            first = next((p for p in r.get("top3_paths") or [] if p), "")
            print("      held by: " + (first[:140] if first else "-"))
        if r.get("stderr_tail"):
            for line in r["stderr_tail"].splitlines():
                print("      ! " + line)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slice", choices=("tune", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6",
                                        "holdout7", "holdout8", "holdout9", "holdout10", "holdout11", "holdout12",
                                        "holdout13", "holdout14", "holdout15", "holdout16", "holdout17",
                                        "holdout18", "holdout19", "holdout20", "holdout21", "holdout22", "holdout23",
                                        "holdout24", "holdout25", "all"),
                    default="all")
    ap.add_argument("--logdir", default=None, help="where the runs go (default: a new temp dir, kept)")
    ap.add_argument("--only", default=None, help="run only scenarios whose name contains this (or matches this regex)")
    ap.add_argument("--jobs", type=int, default=1, help="variants run in parallel (default 1)")
    ap.add_argument("--show-holdout", action="store_true", help="print per-run rows for the holdout slices too")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per variant before it is killed")
    ap.add_argument("--steps", type=int, default=None, help="override every scenario's STEPS (smoke runs)")
    ap.add_argument("--json", default=None, help="also write the scored rows and totals to this file")
    ap.add_argument("--child", nargs=4, metavar=("PATH", "VARIANT", "RUNDIR", "STEPS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        _child(*args.child)
        return 0

    scenarios = _discover()
    if args.slice != "all":
        scenarios = [s for s in scenarios if s.get("SLICE") == args.slice]
    if args.only:
        def _match(name):
            try:
                return args.only in name or re.search(args.only, name) is not None
            except re.error:
                return args.only in name
        scenarios = [s for s in scenarios if _match(s["name"])]
    if not scenarios:
        print("no scenario selected")
        return 0
    logdir = os.path.abspath(args.logdir or tempfile.mkdtemp(prefix="tb-leak-heldout-"))
    os.makedirs(logdir, exist_ok=True)
    print("logdir: %s  (%d scenarios, %d runs, jobs=%d)" % (logdir, len(scenarios), 2 * len(scenarios), args.jobs))

    jobs = [(s, v) for s in scenarios for v in VARIANTS]
    results = {}
    t_all = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futs = {pool.submit(_run_variant, s, v, logdir, args.timeout, args.steps): (s["name"], v) for s, v in jobs}
        for fut in concurrent.futures.as_completed(futs):
            res = fut.result()
            results[(res["scenario"], res["variant"])] = res
            print("  ran %-32s %-6s %6.1f s%s" % (res["scenario"], res["variant"], res["wall"],
                                                  "" if res["rc"] == 0 else "  (rc=%s)" % res["rc"]), flush=True)
    run_seconds = time.time() - t_all

    t0 = time.time()
    reports = _analyze(logdir)
    analyze_seconds = time.time() - t0

    rows = []
    for s in scenarios:
        for v in VARIANTS:
            res = results[(s["name"], v)]
            expect = (s.get("EXPECT") or {}).get(v, {})
            verdict, ok, culprit_ok, holder_ok, top3, paths = _score(
                expect, reports.get("%s/%s" % (s["name"], v)), res["rc"])
            passed = ok and culprit_ok is not False        # holder_any is totalled, not part of a pass
            rows.append({"scenario": s["name"], "slice": s.get("SLICE", "?"), "variant": v, "verdict": verdict,
                         "verdict_ok": ok, "culprit_ok": culprit_ok, "holder_ok": holder_ok, "top3": top3,
                         "top3_paths": paths, "pass": passed, "wall": res["wall"],
                         "stderr_tail": res["stderr_tail"]})

    shown = [r for r in rows if not r["slice"].startswith("holdout") or args.show_holdout]
    print()
    if shown:
        _print_table(shown)
    hidden = len(rows) - len(shown)
    if hidden:
        print("(%d holdout runs not shown; --show-holdout to list them)" % hidden)
    print()
    totals = {}
    for label in ("tune", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6",
                  "holdout7", "holdout8", "holdout9", "holdout10", "holdout11", "holdout12",
                  "holdout13", "holdout14", "holdout15", "holdout16", "holdout17", "holdout18",
                  "holdout19", "holdout20", "holdout21", "holdout22", "holdout23", "holdout24", "holdout25"):
        sub = [r for r in rows if r["slice"] == label]
        if sub:
            totals[label] = _totals(sub)
            _print_totals(label, totals[label])
    totals["all"] = _totals(rows)
    _print_totals("all", totals["all"])
    print("runs took %.0f s, analysis %.1f s" % (run_seconds, analyze_seconds))

    if args.json:
        public = rows if args.show_holdout else [r for r in rows if not r["slice"].startswith("holdout")]
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"logdir": logdir, "rows": public, "totals": totals}, fh, indent=2)
    return 0


if __name__ == "__main__":
    if "--child" in sys.argv[1:]:
        main()                       # a failing scenario exits non-zero: the parent reports it
        sys.exit(0)
    try:
        main()
    except KeyboardInterrupt:
        pass
    except Exception:                # a benchmark: report, never fail the caller
        import traceback
        traceback.print_exc()
    sys.exit(0)
