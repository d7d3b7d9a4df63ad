"""``tb-leak analyze LOGDIR``: leak verdicts for saved logdirs, for people and CI.

Exit status: 0 on success; 1 with ``--fail-on-leak`` when a run leaks (and
only then; stderr then says how many leaks, a distributed job's tasks
counting as one); 2 for bad usage or an unreadable logdir; 3 for an internal
error (a bug in tb-leak: the report is incomplete, nothing was judged).
Never imports TensorFlow.

Names in the report (run directories, tags, object types, trace sessions
and hosts) come from the data, so the text and markdown views print them
inert: control characters (terminal escapes, newlines, tabs, DEL, C1
codes), Unicode line separators and bidirectional overrides are shown as
``\\xNN`` / ``\\uNNNN``, and bytes that are not UTF-8 in a directory name as
``\\xNN``. The markdown view also escapes what GitHub would render (emphasis,
strikethrough, links, HTML and entities, tables, math, ``@mentions``). JSON
is exact (``json.dumps`` escapes everything itself).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import traceback

from tb_leak_plugin import __version__
from tb_leak_plugin.reporting import jobs_text
from tb_leak_plugin.units import format_bytes, format_duration, printable  # noqa: F401 (printable: re-exported)

EXIT_OK, EXIT_LEAK, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3

EXIT_STATUS_HELP = """exit status:
  0  success (also when runs leak, unless --fail-on-leak)
  1  --fail-on-leak and at least one run's verdict is leak (never for errors);
     stderr counts the leaks, a distributed job once however many tasks leak;
     compare --fail-on-regression and a candidate run grows more than its base
  2  bad usage, or the logdir cannot be read
  3  internal error in tb-leak (please report it)"""

VERDICT_LABEL = {"leak": "LEAK", "no_leak": "no leak", "inconclusive": "inconclusive"}


def human_bytes(value: float | None, signed: bool = False) -> str:
    """Bytes with binary units (``12.3 KiB``), ``-`` for none."""
    return "-" if value is None else format_bytes(value, signed)


def human_amount(value: float | None, unit: str, signed: bool = False) -> str:
    """A value in its unit, bytes humanised, counts with 3 significant digits."""
    if value is None:
        return "-"
    if unit == "bytes":
        return format_bytes(value, signed)
    text = f"{value:+.3g}" if signed else f"{value:.3g}"
    return f"{text} {unit}"


def human_duration(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds)


def _ci_text(series: dict) -> str:
    ci = series.get("slope_ci")
    if not ci or ci[0] is None or ci[1] is None:
        return "-"
    unit = series["unit"]
    return f"{human_amount(ci[0], unit, True)} .. {human_amount(ci[1], unit, True)}"


def json_safe(value):
    """``value`` with every float that is not finite (NaN, infinities) as
    None: ``--format json`` is strict JSON (RFC 8259), and one such number
    from the data must not cost the whole report."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def trace_lines(culprit: dict) -> list[str]:
    """The leak trace under a culprit: how many live and new, each path
    from its root to the direct holder (then the culprit's type), and the
    culprits held at the same place."""
    details = culprit.get("details") or {}
    if not isinstance(details, dict):
        return []
    lines = []
    trace = details.get("trace") or {}
    if isinstance(trace, dict) and isinstance(trace.get("live"), int):
        live = f"{trace['live']:,} live"
        if isinstance(trace.get("new"), int) and trace.get("new_since_step") is not None:
            live += f" ({trace['new']:,} new since step {trace['new_since_step']})"
        lines.append(f"{live} at step {trace.get('step')}")
    target = culprit["name"].rsplit(".", 1)[-1] if culprit.get("kind") == "object_type" else None
    for entry in details.get("held_by") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), list):
            continue
        hops = [str(hop) for hop in entry["path"]] + ([target] if target else [])
        count = ""
        if details.get("held_by_containers"):
            count = f"   (a container that grew by {entry.get('instances', 0):,} items)" \
                if isinstance(entry.get("instances"), int) else ""
        elif culprit.get("kind") != "container" and isinstance(entry.get("instances"), int):
            count = f"   ({entry['instances']:,} of {entry['of']:,})" if isinstance(entry.get("of"), int) \
                else f"   ({entry['instances']:,})"
        lines.append("held by: " + " → ".join(hops) + count)
    for other in details.get("also") or []:
        if isinstance(other, dict):
            growth = human_amount(other.get("growth_per_step"), other.get("unit", ""), True)
            lines.append(f"also held there: [{other.get('kind')}] {other.get('name')}  {growth}/step")
    return lines


def _library_title(run: dict, key: str) -> str:
    for known in run.get("library_leaks") or []:
        if known.get("key") == key:
            return str(known.get("library", "the library"))
    return "the library"


def _limit_text(series: dict) -> str:
    """`` (cgroup v2 memory.max of 512 MiB)``: the limit a projection to
    out-of-memory is against; empty when the run did not record it."""
    name = series.get("memory_limit")
    if not isinstance(name, str) or not name:
        return ""
    size = series.get("memory_limit_bytes")
    size_text = f" of {human_bytes(size)}" if isinstance(size, (int, float)) and size > 0 else ""
    return printable(f" ({name}{size_text})")


def format_text(report: dict) -> str:
    """A readable report: one block per run, series table, culprits and hints.

    Every line is passed through :func:`printable`: names from the data
    cannot add lines or send terminal escapes."""
    lines = [f"tb-leak report for {report['logdir']}", ""]
    for warning in report["warnings"]:
        lines.append(f"warning: {warning}")
    if report["warnings"]:
        lines.append("")
    for run in report["runs"]:
        label = VERDICT_LABEL.get(run["verdict"], run["verdict"])
        lines.append(f"== run {run['run']}: {label} (confidence {run['confidence']:.0%})")
        lines.append(f"   {run['reason']}")
        if run["growth_bytes_per_step"] is not None:
            per_hour = run.get("growth_bytes_per_hour")
            hour = f", {human_bytes(per_hour, True)}/hour" if per_hour is not None else ""
            lines.append(f"   memory growth ({run['primary_tag']}): {human_bytes(run['growth_bytes_per_step'], True)}/step{hour}")
        judged = [s for s in run["series"] if s["verdict"] != "not_assessed"]
        # Memory and tensor series always; others only when they say something.
        shown = [s for s in judged if s["role"] in ("memory", "tensors") or s["verdict"] != "no_leak"]
        hidden = len(judged) - len(shown)
        judged = shown
        if judged:
            lines.append("   series:")
            tags = [printable(s["tag"]) for s in judged]
            width = max(len(tag) for tag in tags)
            lines.append(f"     {'tag':<{width}}  {'verdict':<12}  {'growth/step':>16}  {'95% interval':>28}  samples")
            for tag, s in zip(tags, judged):
                growth = human_amount(s.get("slope_per_step"), s["unit"], True)
                lines.append(f"     {tag:<{width}}  {s['verdict']:<12}  {growth:>16}  {_ci_text(s):>28}  {s['samples']}")
                if s["verdict"] == "leak" and s.get("seconds_to_exhaustion") is not None:
                    lines.append(f"     {'':<{width}}  out of memory in ~{human_duration(s['seconds_to_exhaustion'])} "
                                 f"at this rate{_limit_text(s)}")
            if hidden:
                lines.append(f"     (+{hidden} more series without growth; --format json lists every series)")
        if run["culprits"]:
            lines.append("   culprits:")
            for rank, culprit in enumerate(run["culprits"][:10], 1):
                growth = human_amount(culprit["growth_per_step"], culprit["unit"], True)
                lines.append(f"     {rank}. [{culprit['kind']}] {culprit['name']}  {growth}/step  "
                             f"(confidence {culprit['confidence']:.0%})")
                lines.append(f"        {culprit['evidence']}")
                lines += ["        " + line for line in trace_lines(culprit)]
                known = (culprit.get("details") or {}).get("library_leak") \
                    if isinstance(culprit.get("details"), dict) else None
                if known:
                    lines.append(f"        library leak: kept by {_library_title(run, known)} (see below)")
        for entry in run.get("traced_earlier") or []:
            lines.append(f"   traced while it trained (step {entry.get('step')}, not growing at the end): "
                         f"[{entry.get('kind')}] {entry.get('name')}")
            for held in (entry.get("held_by") or [])[:2]:
                lines.append("     held by: " + " → ".join(map(str, held.get("path") or [])))
        for known in run.get("library_leaks") or []:
            lines.append(f"   library leak: {known['title']} ({known['versions']})")
            lines.append(f"     {known['what']}")
            lines.append(f"     workaround: {known['workaround']}")
            lines.append(f"     reported: {', '.join(known['issues'])}")
        if run["hints"]:
            lines.append("   what it usually means:")
            for hint in run["hints"]:
                lines.append(f"     - {hint['title']}: {hint['text']}")
                lines.append(f"       fix: {hint['fix']}")
        traces = run.get("traces")
        if traces:
            for session in traces.get("sessions", []):
                if session.get("error"):
                    lines.append(f"   trace {session['session']}/{session['host']}: error: {session['error']}")
                elif session.get("coverage_note"):
                    lines.append(f"   trace {session['session']}/{session['host']}: {session['coverage_note']}")
        for warning in run["warnings"]:
            lines.append(f"   warning: {warning}")
        lines.append("")
    for job in report.get("jobs", []):
        lines.extend(jobs_text.job_lines(job) + [""])
    for group in jobs_text.groups_not_jobs(report):
        leaking = ", ".join(group["leaking"]) or "none"
        lines.append(f"group {group['parent']}: {len(group['runs'])} runs, leaking: {leaking}")
    if not report["runs"]:
        lines.append("no runs found")
    return "\n".join(printable(line) for line in lines).rstrip() + "\n"


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|#!()~&$])")


def _md_escape(text) -> str:
    """Names from event files, made inert in GitHub markdown: one line
    (:func:`printable`), every character markdown acts on backslash-escaped
    (emphasis, code, links, images, HTML, entities such as ``&amp;``,
    tables, headings, ``~~`` strikethrough, ``$`` math), and ``@`` followed
    by a zero-width space so ``@name`` mentions nobody."""
    escaped = _MD_SPECIAL.sub(r"\\\1", printable(text))
    return escaped.replace("@", "@&#8203;")


def format_markdown(report: dict) -> str:
    """A report for pasting into a pull request or an issue."""
    lines = [f"## tb-leak report: {_md_escape(report['logdir'])}", ""]
    for warning in report["warnings"]:
        lines.append(f"> warning: {_md_escape(warning)}")
    lines += ["| run | verdict | confidence | memory growth / step | top culprit |", "|---|---|---|---|---|"]
    for run in report["runs"]:
        top = run["culprits"][0]["name"] if run["culprits"] else ""
        icon = {"leak": "🔴", "no_leak": "🟢"}.get(run["verdict"], "⚪")
        lines.append(f"| {_md_escape(run['run'])} | {icon} {VERDICT_LABEL.get(run['verdict'], run['verdict'])} | "
                     f"{run['confidence']:.0%} | {human_bytes(run['growth_bytes_per_step'], True)} | {_md_escape(top)} |")
    for run in report["runs"]:
        if run["verdict"] != "leak":
            if run.get("traced_earlier"):  # a leak let go before the end: who held it
                lines += ["", f"### {_md_escape(run['run'])}", "", _md_escape(run["reason"]), ""]
                for entry in run["traced_earlier"]:
                    held = " → ".join(map(str, (entry.get("held_by") or [{}])[0].get("path") or []))
                    lines.append(f"- traced at step {entry.get('step')}: **{_md_escape(str(entry.get('kind')))}** "
                                 f"{_md_escape(str(entry.get('name')))}, held by {_md_escape(held)}")
            continue
        lines += ["", f"### {_md_escape(run['run'])}", "", _md_escape(run["reason"]), ""]
        for culprit in run["culprits"][:5]:
            growth = human_amount(culprit["growth_per_step"], culprit["unit"], True)
            lines.append(f"- **{_md_escape(culprit['kind'])}** {_md_escape(culprit['name'])}: {growth}/step. "
                         f"{_md_escape(culprit['evidence'])}")
            lines += ["  - " + _md_escape(line) for line in trace_lines(culprit)]
        for known in run.get("library_leaks") or []:
            # The catalogue is tb-leak's own text.
            lines.append(f"- **library leak** ({known['library']}, {known['versions']}): {known['title']}. "
                         f"**Workaround:** {known['workaround']} ({', '.join(known['issues'])})")
        for hint in run["hints"]:
            # Hints are tb-leak's own text, with intended `code` spans.
            lines.append(f"- *{hint['title']}*: {hint['text']} **Fix:** {hint['fix']}")
    for job in report.get("jobs", []):
        lines.extend(jobs_text.markdown_lines(job, _md_escape))
    return "\n".join(printable(line) for line in lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tb-leak", description="Find memory leaks in TensorBoard logdirs.",
                                     epilog=EXIT_STATUS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"tb-leak {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    analyze = commands.add_parser("analyze", help="analyse a logdir and print a verdict per run",
                                  description="Analyse a logdir and print a verdict per run.",
                                  epilog=EXIT_STATUS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    analyze.add_argument("logdir", help="TensorBoard logdir: a local path, or s3://bucket/prefix (boto3), "
                                        "gs://... and other fsspec schemes (their fsspec package)")
    analyze.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    analyze.add_argument("--run", metavar="REGEX", help="only runs whose name matches this regular expression")
    analyze.add_argument("--fail-on-leak", action="store_true", help="exit 1 when any run's verdict is leak")
    analyze.add_argument("--no-traces", action="store_true", help="skip profiler traces")
    analyze.add_argument("--jobs", type=int, default=None,
                         help="worker processes (default: by cores and run count; 1 = none)")
    analyze.add_argument("--max-trace-mib", type=float, default=None,
                         help="refuse trace files larger than this many MiB (default 512)")
    compare = commands.add_parser(
        "compare", help="compare two runs (or two logdirs run by run): did the candidate's growth regress?",
        description="Compare the memory growth of two runs, or of two logdirs run by run (runs paired by "
                    "name): growth per series side by side with 95%% intervals, culprits new or grown, and a "
                    "verdict on the difference: regression, no_regression, improvement or inconclusive.",
        epilog=EXIT_STATUS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    compare.add_argument("base", help="the run directory or logdir before the change")
    compare.add_argument("candidate", help="the run directory or logdir after the change")
    compare.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    compare.add_argument("--run", metavar="REGEX", help="only runs whose name matches this regular expression")
    compare.add_argument("--fail-on-regression", action="store_true",
                         help="exit 1 when any candidate run regressed against its base")
    compare.add_argument("--no-traces", action="store_true", help="skip profiler traces")
    commands.add_parser(
        "tensorboard", add_help=False,
        help="run TensorBoard through its TensorFlow-free I/O layer (s3:// works with TensorFlow installed)",
        description="tb-leak tensorboard [TENSORBOARD ARGS...]: TensorBoard itself, told to read the "
                    "logdir through its own TensorFlow-free gfile (S3 via boto3, fsspec schemes) even where "
                    "TensorFlow is installed (TensorFlow 2.21 has no s3:// filesystem).")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``tb-leak`` command; returns the exit status (see :data:`EXIT_STATUS_HELP`).

    Any unexpected exception is an internal error, reported on stderr with
    status 3: never status 1, which CI reads as "a leak was found"."""
    try:
        return _main(argv)
    except Exception as error:  # a bug: say so, never look like a leak verdict
        _error(f"internal error: {type(error).__name__}: {error} (a bug in tb-leak; "
               "please report it with the traceback below)")
        for line in traceback.format_exc().rstrip().splitlines():
            print(printable(line), file=sys.stderr)
        return EXIT_INTERNAL


def _error(message: str) -> None:
    print(f"tb-leak: error: {printable(message)}", file=sys.stderr)


def run_tensorboard(argv: list[str]) -> int:
    """``tb-leak tensorboard ARGS``: TensorBoard's own ``main`` with its
    TensorFlow-free I/O layer selected, the switch TensorBoard provides for
    that (the module ``tensorboard.compat.notf``). Only this server process
    is affected; every TensorBoard flag works as usual. For ``s3://`` logdirs
    the Python loader is used (``--load_fast=auto`` picks it by itself)."""
    import types

    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from tensorboard import main as tensorboard_main

    sys.argv = ["tensorboard", *argv]
    tensorboard_main.run_main()
    return EXIT_OK


def _main(argv: list[str] | None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    if arguments[:1] == ["tensorboard"]:
        return run_tensorboard(arguments[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return EXIT_USAGE if exit_.code not in (0, None) else EXIT_OK
    if args.command not in ("analyze", "compare"):
        parser.print_usage(sys.stderr)
        _error("a command is required (analyze, compare)")
        return EXIT_USAGE
    if args.run:
        try:
            re.compile(args.run)
        except re.error as error:
            _error(f"--run {args.run!r} is not a valid regular expression: {error}")
            return EXIT_USAGE
    if args.command == "compare":
        return _compare(args)
    if args.jobs is not None and args.jobs < 1:
        _error("--jobs must be at least 1")
        return EXIT_USAGE
    if args.max_trace_mib is not None and not (math.isfinite(args.max_trace_mib) and args.max_trace_mib > 0):
        _error("--max-trace-mib must be positive")
        return EXIT_USAGE
    from tb_leak_plugin.reporting import logdir as analyze
    from tb_leak_plugin.eventfile import reader as loading

    max_bytes = int(args.max_trace_mib * (1 << 20)) if args.max_trace_mib else None
    try:
        report = analyze.analyze_logdir(args.logdir, run_filter=args.run, with_traces=not args.no_traces,
                                        max_trace_bytes=max_bytes, jobs=args.jobs)
    except loading.LogdirError as error:
        _error(str(error))
        return EXIT_USAGE
    data = report.to_dict()
    if args.format == "json":
        _write_out(json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n")
    elif args.format == "markdown":
        _write_out(format_markdown(data))
    else:
        _write_out(format_text(data))
    if args.fail_on_leak and report.any_leak:
        count, phrases = report.leak_count()
        print(f"tb-leak: {printable(jobs_text.fail_message(count, phrases))}", file=sys.stderr)
        return EXIT_LEAK
    return EXIT_OK


def _compare(args) -> int:
    """``tb-leak compare BASE CANDIDATE``."""
    from tb_leak_plugin.reporting import compare as compare_text
    from tb_leak_plugin.reporting import logdir as analyze
    from tb_leak_plugin.eventfile import reader as loading

    try:
        sides = [analyze.analyze_logdir(path, run_filter=args.run, with_traces=not args.no_traces).to_dict()
                 for path in (args.base, args.candidate)]
        report = compare_text.compare_logdirs(*sides)
    except (loading.LogdirError, compare_text.PairingError) as error:
        _error(str(error))
        return EXIT_USAGE
    if args.format == "json":
        _write_out(json.dumps(json_safe(report), indent=2, allow_nan=False) + "\n")
    elif args.format == "markdown":
        _write_out(compare_text.format_markdown(report, _md_escape))
    else:
        _write_out(compare_text.format_text(report))
    if args.fail_on_regression and compare_text.any_regression(report):
        count = sum(p["verdict"] == "regression" for p in report["pairs"])
        print(f"tb-leak: {count} run{'s' if count != 1 else ''} regressed", file=sys.stderr)
        return EXIT_LEAK
    return EXIT_OK


def _write_out(text: str) -> None:
    """Write the report to stdout whatever its encoding, and survive a reader
    that stops early (``tb-leak analyze ... | head``): the exit status still
    tells the verdict."""
    stream = sys.stdout
    try:
        try:
            stream.write(text)
        except UnicodeEncodeError:  # e.g. PYTHONIOENCODING=ascii: escape what it cannot show
            encoding = getattr(stream, "encoding", None) or "ascii"
            fallback = text.encode(encoding, errors="backslashreplace").decode(encoding)
            stream.write(fallback)
        stream.flush()
    except BrokenPipeError:
        _silence_stdout()


def _silence_stdout() -> None:
    # Python would report the broken pipe again when flushing at exit.
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
