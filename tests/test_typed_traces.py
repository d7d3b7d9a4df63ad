"""Leak traces as values: typed hops, wildcard keys, paths that cannot
accumulate, and known library leaks.

`referrers.trace` runs on real objects in this process (no TensorFlow);
the report side reads traces as the monitor writes them.
"""

import dataclasses
import sys
import json

import pytest

from tb_leak_plugin.analysis import holders, library_leaks
from tb_leak_plugin.analysis.results import Culprit
from tb_leak_plugin.capture import online, referrers
from tb_leak_plugin.metadata import hop_text


class Box:
    def __init__(self):
        self.payload = [0]


def test_a_thousand_keys_are_one_path_with_a_count():
    registry = {}
    for i in range(1000):
        registry[f"pyfunc_{i}"] = Box()
    targets = [registry[f"pyfunc_{i}"] for i in range(0, 1000, 31)]
    result = referrers.trace(targets, time_cap_s=2.0)
    assert len(result.held_by) == 1, [h.path for h in result.held_by]
    held = result.held_by[0]
    assert held.instances == len(targets)
    key = held.hops[-1]
    assert key["kind"] == "key" and key["name"] == "pyfunc_*" and key["keys"] == len(targets)
    assert held.path[-1] == f"dict[<{len(targets)} keys 'pyfunc_*'>]"
    assert held.hops[0] == {"kind": "local", "owner": "test_a_thousand_keys_are_one_path_with_a_count",
                            "name": "registry", "where": held.hops[0]["where"]}


def test_one_key_stays_concrete():
    store = {"layer_3": [Box() for _ in range(20)]}
    result = referrers.trace(store["layer_3"][:10], time_cap_s=2.0)
    (held,) = result.held_by
    assert [h["kind"] for h in held.hops] == ["local", "key", "item"]
    assert held.path[1:] == ["dict['layer_3']", "list"]


class Trainer:
    def __init__(self):
        self.history = []


def test_attributes_and_closures_are_typed():
    trainer = Trainer()
    trainer.history.extend(Box() for _ in range(8))
    result = referrers.trace(trainer.history[:4], time_cap_s=2.0)
    hops = result.held_by[0].hops
    assert hops[1] == {"kind": "attribute", "owner": "Trainer", "name": "history"}
    assert result.held_by[0].path[1] == "Trainer.history"

    def make():
        kept = []

        def step():
            kept.append(Box())
        return step

    step = make()
    for _ in range(5):
        step()
    result = referrers.trace(step.__closure__[0].cell_contents[:3], time_cap_s=2.0)
    hops = result.held_by[0].hops
    assert [h["kind"] for h in hops] == ["local", "closure", "item"], hops
    assert hops[0]["name"] == "step" and hops[1]["name"] == "kept"
    assert hops[1]["owner"].startswith("test_attributes_and_closures_are_typed.<locals>")


def _held(hops, instances):
    return referrers.HeldBy(path=[hop_text(h) for h in hops], instances=instances, hops=hops)


def test_a_path_that_holds_one_object_is_not_where_many_accumulate():
    single = _held([{"kind": "global", "name": "email.quoprimime._QUOPRI_BODY_MAP"}], 1)
    fanned = _held([{"kind": "local", "owner": "train", "name": "kept", "where": "t.py:1"},
                    {"kind": "item", "owner": "list"}], 30)
    among_many = referrers.TraceResult([fanned, single], traced=32, found=31, seconds=0.1, complete=True)
    assert online._accumulates(fanned, among_many)
    assert not online._accumulates(single, among_many)
    # ... also when the time cap left most of the sample unfound.
    cut_short = referrers.TraceResult([single], traced=32, found=2, seconds=0.25, complete=False)
    assert not online._accumulates(single, cut_short)
    # Traced alone (a tf.function, one leaking object), the one path is the answer.
    alone = referrers.TraceResult([single], traced=1, found=1, seconds=0.1, complete=True)
    assert online._accumulates(single, alone)


def test_a_wildcard_counts_every_instance_when_each_has_its_own_key():
    hops = [{"kind": "global", "name": "script_ops._py_funcs"},
            {"kind": "attribute", "owner": "FuncRegistry", "name": "_funcs"},
            {"kind": "key", "name": "pyfunc_*", "key_type": "str", "keys": 29}]
    entry = online._held_entry(_held(hops, 29), 1164)
    assert entry["path"][-1] == "dict[<1,164 keys 'pyfunc_*'>]"
    assert entry["instances"] == 1164 and entry["sampled"] == 29


def test_hops_read_from_a_file_are_checked():
    path = ["global `m.x`", "list"]
    good = [{"kind": "global", "name": "m.x"}, {"kind": "item", "owner": "list"}]
    assert holders.clean_hops(good, path) == good
    for bad in ([{"kind": "<script>", "name": "x"}, {"kind": "item"}], [{"kind": "global"}], "nope",
                [{"kind": "global", "name": "m.x"}, ["item"]]):
        assert holders.clean_hops(bad, path) == [{"kind": "text", "name": p} for p in path]
    long = holders.clean_hops([{"kind": "global", "name": "x" * 10_000, "keys": -1}, {"kind": "item"}], path)
    assert len(long[0]["name"]) <= holders.MAX_TEXT_CHARS and "keys" not in long[0]


def test_holder_key_is_the_accumulation_point_from_typed_hops():
    hops = [{"kind": "local", "owner": "train", "name": "history", "where": "t.py:3"},
            {"kind": "item", "owner": "list"}, {"kind": "attribute", "owner": "Record", "name": "payload"}]
    a = Culprit("object_type", "m.Record", 1.0, "objects", "", 1.0,
                details={"held_by": [{"path": [hop_text(h) for h in hops], "hops": hops}]})
    container_hops = [hops[0], {"kind": "object", "owner": "list", "holds": "Record"}]
    b = Culprit("container", "train() local `history` (t.py:3) → list of Record", 1.0, "items", "", 1.0,
                details={"container_hops": container_hops,
                         "held_by": [{"path": [hop_text(hops[0])], "hops": [hops[0]]}]})
    assert holders.holder_key(a) == holders.holder_key(b)
    merged = holders.merge_by_holder([a, b])
    assert merged == [a] and a.details["also"][0]["kind"] == "container"
    # A built-in type held there is a part of the container: the container leads.
    keys = Culprit("object_type", "builtins.tuple", 16.0, "objects", "", 1.0,
                   details={"held_by": [{"path": [hop_text(h) for h in hops[:2]], "hops": hops[:2]}]})
    memo = dataclasses.replace(b, details={k: v for k, v in b.details.items() if k != "also"})
    assert holders.holder_key(keys) == holders.holder_key(memo)
    merged = holders.merge_by_holder([keys, memo])
    assert merged == [memo] and [a["name"] for a in memo.details["also"]] == ["builtins.tuple"]


# ------------------------------------------------------------ library leaks


def _culprit(kind, name, hint=None, paths=()):
    return Culprit(kind, name, 1.0, "objects", "", 1.0, hint=hint,
                   details={"held_by": [{"path": list(p)} for p in paths]} if paths else {})


@pytest.mark.parametrize("culprit,key", [
    (_culprit("object_type", "weakref.KeyedRef", "py_function_registry"), "py_function_registry"),
    (_culprit("object_type", "builtins.function", "objects_generic",
              [["global `tensorflow.python.ops.script_ops._py_funcs`", "FuncRegistry._funcs"]]),
     "py_function_registry"),
    (_culprit("runtime", "Keras automatic names (keras)", "keras_names"), "keras_global_state"),
    (_culprit("retracing", "tf.function traces (eager context functions)", "retracing"), "retracing"),
    (_culprit("graph", "graph operations in the default graph", "graph_grows"), "v1_default_graph"),
    (_culprit("graph", "graph operations in graphs the program holds", "graph_grows"), None),
    (_culprit("object_type", "tensorflow.python.client.session.InteractiveSession", "sessions_kept",
              [["global `tensorflow.python.framework.stack._default_session_stack`", "DefaultStack"]]),
     "default_session_stack"),
    (_culprit("object_type", "tensorflow.python.client.session.Session", "sessions_kept",
              [["train() local `sessions` (t.py:9)", "list"]]), None),
    (_culprit("object_type", "tensorflow.python.framework.ops.EagerTensor", "tensors_kept",
              [["train() local `history` (t.py:1)", "list"]]), None),
    (_culprit("retracing", "train_step", "function_per_step"), None),
])
def test_known_library_leaks_are_told_apart_from_the_programs_own(culprit, key):
    entry = library_leaks.match(culprit)
    assert (entry.key if entry else None) == key


def test_every_catalogue_entry_says_where_it_is_known_and_what_to_do():
    for entry in library_leaks.CATALOGUE:
        assert entry.versions and entry.workaround and entry.what
        assert entry.issues and all(u.startswith("https://github.com/") for u in entry.issues)
        assert entry.hints or entry.names or entry.hops
        json.dumps(entry.to_dict())


def test_a_library_registry_is_a_root_named_in_one_level():
    tf = pytest.importorskip("tensorflow")
    from tensorflow.python.ops import script_ops

    def rows():
        yield 1.0

    for _ in range(24):  # a pipeline over a Python generator rebuilt per step
        next(iter(tf.data.Dataset.from_generator(rows, output_signature=tf.TensorSpec([], tf.float32))))
    targets = list(script_ops._py_funcs._funcs.data.values())[-16:]
    assert len(targets) >= 8
    result = referrers.trace(targets, time_cap_s=2.0)
    assert result.levels <= 1, result.levels
    held = result.held_by[0]
    assert held.path[:3] == ["global `tensorflow.python.ops.script_ops._py_funcs`", "FuncRegistry._funcs",
                             "WeakValueDictionary.data"], held.path
    assert held.hops[3]["kind"] == "key" and held.hops[3]["name"] == "pyfunc_*" and held.hops[3]["keys"] >= 8
    assert library_leaks.match(_culprit("object_type", "builtins.function", None, [held.path])).key \
        == "py_function_registry"


def test_the_report_lists_library_leaks_in_every_format(tmp_path, capsys):
    from tb_leak_plugin.reporting import cli
    from test_cli import write_run

    write_run(str(tmp_path / "run"), True, retrace=True)
    assert cli.main(["analyze", str(tmp_path), "--format", "json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    known = {k["key"]: k for k in run["library_leaks"]}
    assert "retracing" in known and known["retracing"]["culprits"]
    assert any(c["details"].get("library_leak") == "retracing" for c in run["culprits"])
    cli.main(["analyze", str(tmp_path)])
    text = capsys.readouterr().out
    assert "library leak: tf.function's trace cache" in text and "workaround:" in text
    cli.main(["analyze", str(tmp_path), "--format", "markdown"])
    assert "**library leak**" in capsys.readouterr().out


def test_a_library_leak_found_by_a_probe_names_the_registry_that_holds_it():
    """The custom-gradient probe counts entries of TensorFlow's gradient
    registry: the culprit it makes is told that registry as its holder (no
    trace needed), and a traced holder is never replaced."""
    culprit = _culprit("runtime", "TensorFlow's custom-gradient registry", "custom_gradients")
    (entry,) = library_leaks.label([culprit])
    assert entry.key == "gradient_registry"
    (held,) = culprit.details["held_by"]
    assert held["source"] == "probe"
    assert held["path"] == ["global `tensorflow.python.framework.ops._gradient_registry`", "Registry._registry",
                            "dict['CustomGradient-*']"]
    traced = _culprit("runtime", "TensorFlow's custom-gradient registry", "custom_gradients",
                      [["train() local `step_fn` (t.py:3)"]])
    library_leaks.label([traced])
    assert traced.details["held_by"] == [{"path": ["train() local `step_fn` (t.py:3)"]}]
    # The path is where this TensorFlow keeps them.
    tf = pytest.importorskip("tensorflow")
    from tensorflow.python.framework import ops

    assert type(ops._gradient_registry).__name__ == "Registry" and isinstance(ops._gradient_registry._registry, dict)

    @tf.custom_gradient
    def square(x):
        return x * x, lambda dy: 2 * x * dy

    tf.function(square).get_concrete_function(tf.TensorSpec([], tf.float32))
    assert any(str(name).startswith("CustomGradient-") for name in ops._gradient_registry._registry)


def test_a_leak_let_go_before_the_end_keeps_its_trace_in_the_report(tmp_path, capsys):
    """The watch traced a leak while the run trained, then the program let it
    go: the saved report no longer has the culprit, and still says who held
    it and when, in every format, without changing the verdict."""
    import numpy as np

    from tb_leak_plugin.analysis.report import build_run_report
    from tb_leak_plugin.analysis.series import RunData, Series
    from tb_leak_plugin.metadata import HELD_BY_FORMAT, HELD_BY_GROUP, SeriesInfo

    rng = np.random.default_rng(3)
    steps = np.arange(0, 1200, 4)
    rss = 400e6 + np.where(steps < 600, steps * 64e3, 0.0) + rng.normal(0, 20e3, steps.size)
    info = SeriesInfo("process", "rss_bytes", "bytes")
    run = RunData(name="released", path=None)
    run.series[info.tag] = Series.from_points(info.tag, info, steps, steps * 0.05, rss)
    trace = {"format": HELD_BY_FORMAT, "culprit": {"kind": "object_type", "name": "numpy.ndarray"},
             "step": 400, "live": 101, "held_by": [
                 {"path": ["train() local `snapshots` (t.py:9)", "list[*]"], "instances": 100}]}
    held = SeriesInfo(HELD_BY_GROUP, "t0", "instances", "object_type:numpy.ndarray", detail=json.dumps(trace))
    run.series[held.tag] = Series.from_points(held.tag, held, [400], [20.0], [100.0])
    without = build_run_report(RunData(name="released", path=None, series={info.tag: run.series[info.tag]}))
    report = build_run_report(run)
    assert report.verdict == without.verdict != "leak"
    assert not any(c.name == "numpy.ndarray" for c in report.culprits)
    (entry,) = report.traced_earlier
    assert entry["name"] == "numpy.ndarray" and entry["step"] == 400 and entry["live"] == 101
    assert entry["held_by"][0]["path"][0] == "train() local `snapshots` (t.py:9)"
    assert "train() local `snapshots`" in report.reason and "step 400" in report.reason
    assert report.to_dict()["traced_earlier"][0]["name"] == "numpy.ndarray"
    from tb_leak_plugin.reporting import cli

    text = cli.format_text({"logdir": "x", "warnings": [], "runs": [report.to_dict()], "jobs": []})
    assert "traced while it trained (step 400" in text and "held by: train() local `snapshots`" in text
    markdown = cli.format_markdown({"logdir": "x", "warnings": [], "runs": [report.to_dict()], "jobs": []})
    assert "traced at step 400" in markdown and "snapshots" in markdown


def _memory_leak_with_container_trace(leaking: bool, holds: str = "TarInfo"):
    """A run whose Python blocks (and RSS) grow 176 blocks a step for 3,000
    steps or stay flat, with three heap walks (too few to judge a type's
    count), and the leak watch's trace of the blocks to a container that
    grew between the walks, as the monitor writes it."""
    import numpy as np

    from tb_leak_plugin.analysis.series import RunData, Series
    from tb_leak_plugin.metadata import HELD_BY_FORMAT, HELD_BY_GROUP, SeriesInfo, hop_text

    rng = np.random.default_rng(5)
    steps = np.arange(0, 3000, 12)
    rate = 176.0 if leaking else 0.0
    run = RunData(name="tar", path=None)
    for info, level, slope, noise in (
            (SeriesInfo("python", "allocated_blocks", "blocks"), 2.0e6, rate, 40.0),
            (SeriesInfo("process", "rss_anon_bytes", "bytes"), 900e6, rate * 60.0, 20e3)):
        values = level + slope * steps + rng.normal(0, noise, steps.size)
        run.series[info.tag] = Series.from_points(info.tag, info, steps, steps * 0.006, values)
    walks = np.array([0, 203, 2999])
    census = SeriesInfo("objects", "live_count", "count", "tarfile.TarInfo")
    run.series[census.tag] = Series.from_points(census.tag, census, walks, walks * 0.006,
                                                16.0 * walks if leaking else np.full(3, 4.0))
    hops = [{"kind": "local", "owner": "fit", "name": "x", "where": "trainer.py:314"},
            {"kind": "attribute", "owner": "TarSampleStream", "name": "_tar"},
            {"kind": "attribute", "owner": "TarFile", "name": "members"},
            {"kind": "object", "owner": "list", "holds": holds}]
    trace = {"format": HELD_BY_FORMAT, "culprit": {"kind": "series", "name": "leak/python/allocated_blocks"},
             "step": 203, "live": None, "new": None, "new_since_step": None, "traced": 1, "found": 1,
             "seconds": 0.2, "complete": True, "containers": True,
             "held_by": [{"path": [hop_text(h) for h in hops], "hops": hops, "sampled": 1, "instances": 3264}]}
    held = SeriesInfo(HELD_BY_GROUP, "t0", "instances", "series:leak/python/allocated_blocks",
                      detail=json.dumps(trace))
    run.series[held.tag] = Series.from_points(held.tag, held, [203], [1.2], [1.0])
    return run


def test_a_container_the_watch_traced_memory_to_is_named_as_the_culprit():
    """Three heap walks cannot judge a type's count, but the watch saw a
    container grow between them while memory grew and traced it to a root:
    the culprit is what that container retains (a streamed tar's
    ``TarFile.members``), with the memory it costs, not "too short"."""
    from tb_leak_plugin.analysis.report import build_run_report

    report = build_run_report(_memory_leak_with_container_trace(leaking=True))
    assert report.verdict == "leak", report.reason
    # The type the walks saw grow with the leak (16 a step, exactly, at three
    # walks: attribution) leads, held by the container the watch traced; the
    # container and the memory it costs are merged under that holder.
    top = report.culprits[0]
    assert top.kind == "object_type" and top.name == "tarfile.TarInfo", (top.kind, top.name)
    assert "grew with the run's leak" in top.evidence and "short of a leak on its own" in top.evidence
    assert "TarFile.members" in top.details["held_by"][0]["path"], top.details
    also = [a["name"] for a in top.details.get("also", [])]
    assert any(name.endswith("TarFile.members → list of TarInfo") for name in also), also
    assert "leak/python/allocated_blocks" in also  # the memory it costs, merged under the same holder
    assert "census_too_short" not in [c.hint for c in report.culprits]
    # Without the type's count, the container itself is the culprit.
    run = _memory_leak_with_container_trace(leaking=True)
    del run.series["leak/objects/tarfile.TarInfo"]
    container = next(c for c in build_run_report(run).culprits[:3] if c.kind == "container")
    assert container.name.endswith("TarFile.members → list of TarInfo"), container.name
    assert container.growth_per_step == pytest.approx(3264 / 203)
    assert container.details["held_by"][0]["path"][-1] == "TarFile.members"
    assert "leak/python/allocated_blocks" in [a["name"] for a in container.details.get("also", [])]
    # The same trace in a run that does not leak names nothing.
    clean = build_run_report(_memory_leak_with_container_trace(leaking=False))
    assert clean.verdict != "leak" and not any(c.kind == "container" for c in clean.culprits)


def test_a_container_of_numbers_is_not_named_as_what_holds_memory_growth():
    """The last 200 losses, re-read as a new list every 50 steps, grew
    between early walks while native memory grew 13 KiB a step: numbers of a
    few dozen bytes each cannot hold that, so the container is neither a
    culprit nor the memory's holder."""
    from tb_leak_plugin.analysis.report import build_run_report

    report = build_run_report(_memory_leak_with_container_trace(leaking=True, holds="tuple(int, float)"))
    assert report.verdict == "leak", report.reason
    assert not any(c.kind == "container" for c in report.culprits)
    blocks = next(c for c in report.culprits if c.name == "leak/python/allocated_blocks")
    assert not (blocks.details or {}).get("held_by"), blocks.details


# ----------------------------------------------------- chains, registries, fresh objects


def _wrap(fn):
    def wrapper(*args):
        return fn(*args)
    wrapper.__wrapped__ = fn
    return wrapper


class Tool:
    def __init__(self, entrypoint):
        self.entrypoint = entrypoint


def test_a_chain_of_wrappers_is_one_path_with_its_length():
    """Each wrapper wraps the last one: every wrapper has a path of its own
    length, and all of them are one signature with a repeat count."""
    tools = [Tool(len)]
    made = []
    for _ in range(12):
        tools[0].entrypoint = _wrap(tools[0].entrypoint)
        made.append(tools[0].entrypoint)
    targets = made[-9:-2]  # seven wrappers, two to eight links below the newest
    del made
    result = referrers.trace(targets, time_cap_s=2.0)
    (held,) = result.held_by
    assert held.instances == len(targets)
    repeat = held.hops[-1]
    assert repeat["kind"] == "repeat" and (repeat["min_count"], repeat["count"]) == (2, 8), held.hops
    assert held.path[-1] == "(function.__wrapped__) × 2-8"
    assert held.path[:3] == [held.path[0], "list", "Tool.entrypoint"]
    assert "tools" in held.path[0]
    # Folded hops are read back from a file as they were written.
    assert holders.clean_hops(held.hops, held.path)[-1] == repeat


def test_a_signal_handler_is_a_root():
    import signal

    class Session:
        pass

    def install():
        session = Session()

        def on_signal(signum, frame, kept=session):
            return kept

        signal.signal(signal.SIGUSR1, on_signal)

    previous = signal.getsignal(signal.SIGUSR1)
    install()
    try:
        # No variable of this function holds the session: only the handler does.
        result = referrers.trace([signal.getsignal(signal.SIGUSR1).__defaults__[0]], time_cap_s=2.0)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    paths = [h.path for h in result.held_by]
    assert any(p[0] == "interpreter registry `signal handler of SIGUSR1`" for p in paths), paths


def test_what_only_the_interpreter_holds_is_rooted_there_and_the_method_named():
    """``os.register_at_fork`` keeps its callbacks in the interpreter's state,
    which no Python object refers to: the chain starts at that list, and the
    bound method on the way is named."""
    import gc
    import os

    # (A census another test dropped without releasing it, still waiting
    # for the collector, lists every object: that list would hold the
    # interpreter's list too.)
    gc.collect()

    class Prefetcher:
        def reset_after_fork(self):
            pass

    kept = [Prefetcher() for _ in range(3)]
    for prefetcher in kept:
        os.register_at_fork(after_in_child=prefetcher.reset_after_fork)
    targets = kept[:2]
    del prefetcher
    result = referrers.trace(targets, time_cap_s=2.0, exclude=[kept])
    assert result.held_by, "no path"
    hops = result.held_by[0].hops
    assert hops[0]["kind"] == "native" and hops[0]["owner"] == "list", hops
    assert hops[-1] == {"kind": "attribute", "owner": "method `Prefetcher.reset_after_fork`", "name": "__self__"}
    assert "held outside Python" in result.held_by[0].path[0]


def test_objects_made_since_a_baseline_are_climbed_in_memory():
    """A chain of new objects deeper than the search's heap passes: with the
    objects made since a baseline, the search climbs them without a pass,
    and names the holder; without them it runs out of levels."""
    import gc

    tools = [Tool(len)]
    baseline = {id(x) for x in gc.get_objects()}
    for _ in range(40):
        tools[0].entrypoint = _wrap(tools[0].entrypoint)
    oldest = tools[0].entrypoint
    for _ in range(39):
        oldest = oldest.__wrapped__
    targets = [oldest]
    del oldest
    fresh = [x for x in gc.get_objects() if id(x) not in baseline]
    blind = referrers.trace(targets, time_cap_s=2.0, max_depth=6, exclude=[fresh])
    assert not blind.held_by
    seen = referrers.trace(targets, time_cap_s=2.0, max_depth=6, fresh=fresh)
    fresh = None
    (held,) = seen.held_by
    assert "tools" in held.path[0] and held.path[2] == "Tool.entrypoint", held.path
    assert held.hops[-1]["kind"] == "repeat" and held.hops[-1]["count"] == 39
    assert seen.levels <= 3


class Accumulator:
    def __init__(self):
        self._buckets = {}


def test_an_old_container_a_local_holds_is_found_from_the_local_without_a_pass_of_the_heap():
    """The roots' side of the search: the new objects climbed in memory end
    at an old container (a gradient accumulator's buckets, made before the
    baseline), which a running function's local holds through an attribute.
    It is found down from the local, with no pass of the heap (max_depth=0:
    the search may not look for referrers at all)."""
    import gc

    accum = Accumulator()
    baseline = {id(x) for x in gc.get_objects()}
    for window in range(30):
        accum._buckets[window] = [[bytearray(16) for _ in range(4)] for _ in range(2)]
    targets = [accum._buckets[window][1] for window in (3, 17, 25)]
    fresh = [x for x in gc.get_objects() if id(x) not in baseline]
    result = referrers.trace(targets, time_cap_s=2.0, max_depth=0, fresh=fresh)
    fresh = None
    (held,) = result.held_by
    assert held.instances == 3 and result.levels == 0 and result.complete
    assert held.hops[0]["kind"] == "local" and held.hops[0]["name"] == "accum", held.path
    assert held.path[1] == "Accumulator._buckets" and held.hops[2]["kind"] == "key", held.path
    # Nothing else of the program is in reach: a target no local reaches
    # within the search's depth is left to the search of the heap.
    deep = [[[[[[[bytearray(8)]]]]]]]
    assert referrers.DOWN_DEPTH < 7
    result = referrers.trace([deep[0][0][0][0][0][0][0]], time_cap_s=2.0, max_depth=0)
    assert not result.held_by and not result.complete


def test_old_containers_under_one_holder_are_all_found_from_the_local():
    """Four old buckets (made before the baseline) under one dict, each
    keeping new items: every chain down from the local joins the first one
    at the dict, and all four targets are named with no pass of the heap."""
    import gc

    accum = Accumulator()
    accum._buckets = {window: [] for window in range(4)}
    baseline = {id(x) for x in gc.get_objects()}
    for bucket in accum._buckets.values():
        bucket.extend([bytearray(8)] for _ in range(5))
    del bucket
    targets = [bucket[2] for bucket in accum._buckets.values()]
    fresh = [x for x in gc.get_objects() if id(x) not in baseline]
    result = referrers.trace(targets, time_cap_s=2.0, max_depth=0, fresh=fresh)
    fresh = None
    assert result.found == 4 and result.levels == 0 and result.complete, result
    (held,) = result.held_by
    assert held.instances == 4 and held.hops[0]["name"] == "accum", held.path


class _SessionStack:
    def __init__(self):
        self.stack = []


_SESSION_STACK = _SessionStack()


class _Session:
    """Pushes itself on a global stack and keeps a way back to it, as
    TensorFlow's InteractiveSession keeps its default-session context."""

    def __init__(self):
        self._context = {"controller": _SESSION_STACK}
        _SESSION_STACK.stack.append(self)


def test_what_leaks_is_no_way_down_to_its_holder():
    """A session per step pushed on a global stack: the local holding the
    newest session reaches the stack through the session's own context, but
    the stack's holder is the global. The search down from the locals does
    not go through an object of the class that leaks."""
    _SESSION_STACK.stack.clear()
    for _ in range(30):
        sess = _Session()
    targets = _SESSION_STACK.stack[3:20:4]
    result = referrers.trace(targets, time_cap_s=2.0)
    assert sess is _SESSION_STACK.stack[-1]
    (held,) = result.held_by
    assert held.hops[0]["kind"] == "global" and held.hops[0]["name"].endswith("_SESSION_STACK"), held.path
    assert held.instances == len(targets)
    # The stack itself, traced as a container that accumulates sessions.
    result = referrers.trace([_SESSION_STACK.stack], time_cap_s=2.0, containers=True)
    (held,) = result.held_by
    assert held.hops[0]["kind"] == "global" and held.hops[0]["name"].endswith("_SESSION_STACK"), held.path
    _SESSION_STACK.stack.clear()


def test_a_local_is_the_shortest_root_even_where_another_local_reaches_it():
    """A list that is a local of its own and an entry of another local's
    attribute: named as the local (the search down from the locals must
    not hand it the longer path)."""
    trainer = Accumulator()
    history = [Box() for _ in range(3)]
    trainer._buckets["history"] = history
    result = referrers.trace([history], time_cap_s=2.0)
    (held,) = result.held_by
    assert held.hops[0]["kind"] == "local" and held.hops[0]["name"] == "history" and len(held.hops) == 1, held.path


def test_the_search_down_reads_no_large_container_and_keeps_its_reading_budget(monkeypatch):
    """A local that is a 300,000-word vocabulary (a dict the collector does
    not track) beside the local that holds the leak: the search down never
    reads the large dict (its referents would be read in full, past the
    trace's cap), and reads at most MAX_DOWN_READ references in all."""
    import gc

    vocabulary = {f"w{i}": i for i in range(300_000)}
    rows = [list(range(30_000)) for _ in range(40)]  # 1.2 M references in containers under the limit
    accum = Accumulator()
    accum._buckets[0] = [[bytearray(8)]]
    sizes = []

    class Spy:
        def __getattr__(self, name):
            return getattr(gc, name)

        @staticmethod
        def get_referents(*objects):
            out = gc.get_referents(*objects)
            sizes.append(len(out))
            return out

    real = referrers._down_from_locals

    def down(*args, **kwargs):
        monkeypatch.setattr(referrers, "gc", Spy())
        try:
            return real(*args, **kwargs)
        finally:
            monkeypatch.setattr(referrers, "gc", gc)

    monkeypatch.setattr(referrers, "_down_from_locals", down)
    result = referrers.trace([accum._buckets[0][0]], time_cap_s=2.0, max_depth=0)
    assert result.held_by and result.held_by[0].hops[0]["name"] == "accum", result
    assert sizes and max(sizes) <= referrers._LARGE and len(vocabulary) > referrers._LARGE
    assert sum(sizes) <= referrers.MAX_DOWN_READ + referrers._LARGE, sum(sizes)
    del rows


def test_the_hashed_share_of_a_large_type_tells_its_new_instances():
    import numpy as np

    old = [Box() for _ in range(50_000)]
    share = online._mark_share(len(old), online.WATCH.max_marked_instances)
    assert share == 4
    ids = online._in_share(np.fromiter(map(id, old), np.int64, len(old)), share)
    assert abs(ids.size - len(old) / share) < 0.05 * len(old) / share
    marked = np.sort(ids)
    new = [Box() for _ in range(4_000)]
    fresh = online._not_marked(old + new, marked, share)
    assert {id(x) for x in fresh} <= {id(x) for x in new}
    assert abs(len(fresh) - len(new) / share) < 0.2 * len(new) / share


class _Spent:
    __slots__ = ("a", "b")


class _Spec:
    __slots__ = ("a", "b")


def test_objects_made_at_the_addresses_of_freed_baseline_objects_are_new():
    """The allocator gives a freed object's block to the next object of its
    size, whatever its type: a leak's new instances at the addresses of
    objects the baseline saw (and the program freed since) are still new
    (a late-onset leak of module specs read as nothing new, fails on keys
    made of the address alone)."""
    import numpy as np

    spent = [_Spent() for _ in range(20_000)]
    baseline = np.sort(online._object_keys(spent + [online]))
    old_ids = {id(x) for x in spent}
    del spent
    leaked = [_Spec() for _ in range(5_000)]
    reused = sum(id(x) in old_ids for x in leaked)
    assert reused > len(leaked) // 2, reused  # the blocks were handed on
    fresh = online._not_in_baseline(leaked, baseline)
    assert len(fresh) == len(leaked)
    # An object the baseline saw is not new.
    kept = [_Spent() for _ in range(100)]
    assert online._not_in_baseline(kept, np.sort(online._object_keys(kept))) == []


def test_globals_of_modules_made_under_numbered_names_are_one_path():
    """A module imported per trial under a new name and kept in sys.modules:
    each leaked function is a global of its own module. One path with the
    module's number as a wildcard, counted (32 paths of one instance each,
    left out as globals made at import, before)."""
    import types as _types

    made = []
    try:
        for n in range(40):
            name = "trial_description%d" % n
            module = _types.ModuleType(name)
            exec("def control(step):\n    return step\n", module.__dict__)
            sys.modules[name] = module
            made.append(name)
        targets = [sys.modules[name].control for name in made]
        seen = referrers.trace(targets, time_cap_s=2.0)
        targets = None
        top = seen.held_by[0]
        assert top.instances == 40, [(h.path, h.instances) for h in seen.held_by]
        assert top.path[0] == "global `trial_description*.control` (40 names)", top.path
        assert online._accumulates(top, seen)
    finally:
        for name in made:
            sys.modules.pop(name, None)


class _Node:
    def __init__(self):
        self.child = _Child(self)


class _Child:
    def __init__(self, parent):
        self.parent = parent


CYCLES: list = []


def test_new_objects_that_refer_to_each_other_are_still_traced_to_what_holds_them():
    """A node and its child point at each other: every new object has a new
    holder, and the old list that keeps them is found from any of them."""
    import gc

    baseline = {id(x) for x in gc.get_objects()}
    CYCLES[:] = [_Node() for _ in range(50)]
    fresh = [x for x in gc.get_objects() if id(x) not in baseline]
    result = referrers.trace(CYCLES[-5:], time_cap_s=2.0, fresh=fresh)
    fresh = None
    path = result.held_by[0].path
    assert result.found == 5 and path[0].endswith("test_typed_traces.CYCLES`") and path[1:] == ["list"], path
    CYCLES.clear()


class _Held:
    pass


class _Box:
    def __init__(self, held):
        self.held = held


BOXES: list = []


def test_a_level_cut_at_its_widest_names_nothing_as_held_outside_python():
    targets = [_Held() for _ in range(32)]
    BOXES[:] = [_Box(t) for t in targets for _ in range(4)]
    result = referrers.trace(targets, time_cap_s=2.0)
    paths = [h.path for h in result.held_by]
    assert not any("held outside Python" in p[0] for p in paths), paths
    BOXES.clear()


def test_a_signal_handler_whose_hash_is_hostile_is_read_without_running_it():
    import signal

    calls = []

    class Handler:
        def __init__(self):
            self.held = [_Held()]

        def __call__(self, signum, frame):
            pass

        def __hash__(self):
            calls.append(1)
            raise RuntimeError("no")

    import _signal

    previous = _signal.getsignal(signal.SIGUSR2)
    _signal.signal(signal.SIGUSR2, Handler())  # (signal.signal's wrapper would hash it)
    calls.clear()
    try:
        result = referrers.trace([_signal.getsignal(signal.SIGUSR2).held[0]], time_cap_s=2.0)
    finally:
        _signal.signal(signal.SIGUSR2, previous)
    assert not calls
    assert result.held_by[0].path[0] == "interpreter registry `signal handler of SIGUSR2`", result.held_by[0].path


def test_a_memory_leak_with_no_holder_borrows_the_trace_of_what_grew_while_it_grew():
    """A memory series that leaks at the end, with no holder of its own, is
    told the holder of a culprit the watch traced while the run trained
    within the series' current stretch of growth (a list of tensors a local
    kept, let go when the function returned); never one traced before it."""
    import types

    from tb_leak_plugin.analysis import holders
    from tb_leak_plugin.analysis.results import Culprit

    def memory():
        return Culprit(kind="series", name="leak/process/malloc_bytes", growth_per_step=75e3, unit="bytes",
                       evidence="grows", confidence=0.9, details={"tag": "leak/process/malloc_bytes"})

    entry = {"kind": "tensors", "name": "leak/tensors/eager_count", "step": 1197, "live": 9,
             "held_by": [{"path": ["_train() local `layer`", "BayesDense.kl_terms", "TrackedList"],
                          "instances": 9}]}
    reports = {"leak/process/malloc_bytes": types.SimpleNamespace(trend=types.SimpleNamespace(onset_step=987))}
    culprit = memory()
    holders.lend_earlier([culprit], [entry], reports)
    assert culprit.details["held_by"][0]["path"][-2] == "BayesDense.kl_terms"
    assert "traced while it trained through tensors leak/tensors/eager_count at step 1197" in culprit.evidence
    # Traced before the memory's current growth began: not its holder.
    early = memory()
    holders.lend_earlier([early], [{**entry, "step": 500}], reports)
    assert "held_by" not in early.details


def test_a_class_namespace_itself_is_never_a_container_holder():
    """A class's own dict is filled when the class is made: a container whose
    path is the namespace alone is not followed or named (a clean-clone CI
    run named `namespace of class MaskedArray` above the program's list);
    a class attribute's container still is."""
    assert online._interpreter_root([{"kind": "class_namespace", "owner": "MaskedArray"}])
    assert not online._interpreter_root([{"kind": "class_attribute", "owner": "Registry", "name": "items"}])
    assert not online._interpreter_root([{"kind": "class_namespace", "owner": "Registry"},
                                         {"kind": "key", "name": "items", "key_type": "str"}])
    assert online._interpreter_root([{"kind": "global", "name": "sys.modules"}])
    assert not online._interpreter_root([{"kind": "global", "name": "mymodule.cache"}])


class _SlowHeap:
    """The gc module, with each pass of the heap (``get_referrers``) taking
    at least ``seconds``: a heap as large as TensorFlow's (300,000 objects,
    35-110 ms a pass) in a test process that is not."""

    def __init__(self, seconds):
        import gc

        self._gc, self.seconds = gc, seconds

    def get_referrers(self, *objects):
        import time

        time.sleep(self.seconds)
        return self._gc.get_referrers(*objects)

    def __getattr__(self, name):
        return getattr(self._gc, name)


class Registry:
    def __init__(self):
        self.rows = []


def test_a_traces_cap_is_counted_in_passes_of_the_heap_on_a_large_heap(monkeypatch):
    """A module global's object's list holding the target is three passes of
    the heap or more up from it. Where a pass takes 0.15 s, a cap of 0.25 s
    starts no third level and names nothing (the demo's default-session
    stack on a TensorFlow heap); a cap counted in passes as long as the
    first one took names the global, within its ceiling."""
    import types

    module = types.ModuleType("tbleak_test_slow_registry")
    module.registry = Registry()
    module.registry.rows.extend(Box() for _ in range(4))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(referrers, "gc", _SlowHeap(0.15))
    target = [module.registry.rows[2]]

    short = referrers.trace(target, time_cap_s=0.25)
    assert not short.held_by and not short.complete and short.levels <= 2

    counted = referrers.trace(target, time_cap_s=0.25, passes=12, max_cap_s=5.0)
    (held,) = counted.held_by
    assert held.path[0] == "global `tbleak_test_slow_registry.registry`", held.path
    assert held.path[1] == "Registry.rows" and counted.complete
    assert counted.seconds < 5.0

    # The ceiling holds: no more passes than it has room for.
    capped = referrers.trace(target, time_cap_s=0.25, passes=12, max_cap_s=0.3)
    assert not capped.held_by and capped.levels <= 2


def test_the_watch_gives_a_trace_its_passes_within_what_is_left():
    watch = online.LeakWatch("run")
    watch._deadline = float("inf")
    limits = watch._trace_limits()
    assert limits["time_cap_s"] == online.WATCH.trace_cap_s
    assert limits["passes"] == online.WATCH.trace_passes
    assert limits["max_cap_s"] == online.WATCH.max_trace_s
    watch.contention = 2.0
    assert watch._trace_limits()["max_cap_s"] == 2.0 * online.WATCH.max_trace_s
    import time

    watch._deadline = time.perf_counter() + 0.5
    limits = watch._trace_limits()
    assert limits["max_cap_s"] <= 0.35 and limits["time_cap_s"] <= 0.35
    # The owed trace's allowance covers the largest cap.
    assert online.WATCH.first_trace_s * 0.7 >= online.WATCH.max_trace_s


def _memory_culprit(hops, step=4799):
    held = [{"path": [hop_text(h) for h in hops], "hops": hops, "sampled": 3, "instances": 3}]
    return Culprit(kind="series", name="leak/process/malloc_bytes", growth_per_step=12800.0, unit="bytes",
                   evidence="grows", confidence=0.9, details={"tag": "leak/process/malloc_bytes", "held_by": held,
                                                             "trace": {"step": step}})


def test_memory_traced_through_a_containers_items_names_the_container_as_where_it_accumulates():
    """A class-level registry keeps a processor per domain, each with its
    tables (held-out s205's shape, opened): the C heap's growth is traced
    from the new processors' arrays through ``Processor.instance_map``, a
    dict keyed by domain id. That dict is the accumulation point, named by
    what it keeps, with the memory's growth; before, only the memory series
    was a culprit and the registry showed only in its path."""
    hops = [{"kind": "class_attribute", "owner": "Processor", "name": "instance_map"},
            {"kind": "key", "name": "int", "key_type": "other"},
            {"kind": "attribute", "owner": "Processor", "name": "resource_loader"},
            {"kind": "attribute", "owner": "ResourceLoader", "name": "gazetteer", "holds": "ndarray"}]
    memory = _memory_culprit(hops)
    named = holders.retained_containers([memory])
    assert [c.kind for c in named] == ["container"]
    assert named[0].name == "class attribute `Processor.instance_map` → dict of Processor", named[0].name
    assert named[0].growth_per_step == 12800.0 and named[0].unit == "bytes"
    assert named[0].details["held_by"][0]["path"] == ["class attribute `Processor.instance_map`"]
    assert "traced at step 4799" in named[0].evidence
    # The container and the memory are one holder: merged under it.
    merged = holders.merge_by_holder(named + [memory])
    assert len(merged) == 1 and merged[0].details["also"][0]["name"] == "leak/process/malloc_bytes"
    assert memory.details["held_by"][0]["hops"] == hops  # the memory keeps its own path


@pytest.mark.parametrize("hops", [
    # The container is the path's end: its items are the arrays (see adopt_containers).
    [{"kind": "local", "owner": "train", "name": "cache"}, {"kind": "object", "owner": "list", "holds": "ndarray"}],
    # No container on the way: an attribute chain.
    [{"kind": "global", "name": "model"}, {"kind": "attribute", "owner": "Model", "name": "buffer", "holds": "ndarray"}],
    # Items that are containers themselves name no class.
    [{"kind": "global", "name": "tables"}, {"kind": "key", "name": "str", "key_type": "str"},
     {"kind": "item", "owner": "list", "name": "0", "holds": "ndarray"}],
])
def test_a_path_with_no_class_kept_in_a_container_names_no_accumulation_point(hops):
    assert holders.retained_containers([_memory_culprit(hops)]) == []
