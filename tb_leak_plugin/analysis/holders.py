"""Leak traces in a report: who holds each culprit, and culprits held alike.

The monitor writes each leak trace as a ``held_by`` point whose plugin data
carries JSON (format ``metadata.HELD_BY_FORMAT``)::

    {"format": 1, "culprit": {"kind": "object_type", "name": "builtins.list"},
     "step": 812, "live": 812, "new": 798, "new_since_step": 40,
     "traced": 32, "found": 32, "seconds": 0.08, "complete": true,
     "held_by": [{"path": ["train() local `history` (train.py:57)", "list"],
                  "instances": 798, "sampled": 32}]}

Here they are attached to the culprits they trace (the latest trace of
each), as ``details["held_by"]``: ``[{"path": [...], "instances": N,
"of": M}]``, most instances first, the path from the root to the direct
holder; ``instances`` is estimated from the sampled instances (``sampled``
of ``traced``), ``of`` is how many instances were new since the trace's
mark (or live, without one). Culprits whose first path starts at the same
holder are one leak: the first (highest ranked) keeps them in
``details["also"]`` and the others leave the list.
"""

from __future__ import annotations

import json
import math
import re

from tb_leak_plugin.analysis.results import finite_or_none
from tb_leak_plugin.metadata import HELD_BY_FORMAT

# Held-by entries kept per culprit, and the longest path kept.
MAX_PATHS = 5
MAX_PATH_HOPS = 16

# Bounds on what a trace may hold: it comes from a file, and what is read
# reaches every report (JSON, text, markdown, the Leak tab). A trace beyond
# them is skipped (too large, too deep) or cut (long texts, long lists).
MAX_DETAIL_CHARS = 4 << 20      # the JSON text of one trace
MAX_JSON_DEPTH = 20             # a trace nests 4 deep: {held_by: [{path: [...]}]}
MAX_TEXT_CHARS = 300            # a path hop
MAX_NAME_CHARS = 2000           # a culprit's kind and name (only matched, never shown)
MAX_ENTRIES_READ = 64           # held-by entries read from one trace
MAX_COUNT = 2**63 - 1           # instances, steps and counts
_INT_FIELDS = ("step", "live", "new", "new_since_step", "traced", "found")

_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")


def read_traces(series_list, warnings: list | None = None) -> dict[str, dict]:
    """culprit key (``kind:name``) -> the latest valid trace among ``held_by``
    series that names a holder, or the latest one when none does: a trace
    that found no path (cut short on a larger heap at the run's last walk,
    or every path it found left out) says nothing against the holder an
    earlier trace of the same culprit named, and the instances it traced
    are still alive (it traced them).

    Each trace is read defensively: a trace that is too large, nested too
    deep or not the known format is skipped with a warning; numbers that are
    not finite (``NaN``, ``Infinity``) or out of range are read as absent;
    long texts and lists are cut (see the bounds above). What is returned
    holds only the known fields, checked."""
    latest: dict[str, tuple[tuple, dict]] = {}
    for series in series_list:
        tag = _tag_text(getattr(series, "tag", ""))
        problem, trace = _parse(series.info.detail)
        if problem is not None:
            if warnings is not None:
                warnings.append(f"{tag}: leak trace {problem}; skipped")
            continue
        trace = _clean(trace)
        if trace is None:
            if warnings is not None:
                warnings.append(f"{tag}: leak trace in an unknown or newer format; skipped")
            continue
        key = f"{trace['culprit']['kind']}:{trace['culprit']['name']}"
        rank = (bool(trace["held_by"]), trace["step"] if trace["step"] is not None else -1)
        if key not in latest or rank >= latest[key][0]:
            latest[key] = (rank, trace)
    return {key: trace for key, (_step, trace) in latest.items()}


def _tag_text(tag) -> str:
    tag = str(tag)
    return tag if len(tag) <= MAX_TEXT_CHARS else tag[:MAX_TEXT_CHARS] + "…"


def _parse(detail) -> tuple[str | None, object]:
    """(problem, parsed JSON): problem is None when the text parsed."""
    if not isinstance(detail, str):
        return "is not text", None
    if len(detail) > MAX_DETAIL_CHARS:
        return f"is too large ({len(detail):,} characters, at most {MAX_DETAIL_CHARS:,})", None
    if _too_deep(detail, MAX_JSON_DEPTH):
        return f"is nested deeper than {MAX_JSON_DEPTH} levels", None
    try:
        # NaN and Infinity (which Python's json accepts) and numbers that
        # overflow to infinity are read as null.
        return None, json.loads(detail, parse_constant=lambda _name: None, parse_float=_finite_float)
    except (TypeError, ValueError, RecursionError):
        return "is not valid JSON", None


def _finite_float(text: str):
    value = float(text)
    return value if math.isfinite(value) else None


def _too_deep(text: str, limit: int) -> bool:
    """Whether the JSON ``text`` nests arrays and objects more than ``limit``
    deep (brackets inside strings do not count). Linear, no recursion."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for match in _BRACKET.finditer(_JSON_STRING.sub('""', text)):
        if match.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def _count(value):
    """An integer count in range, or None (bools, floats, strings are not counts)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        return None
    return value


def _text(value, limit: int = MAX_TEXT_CHARS) -> str:
    value = str(value)
    return value if len(value) <= limit else value[:limit - 1] + "…"


def _clean(trace) -> dict | None:
    """The known fields of a parsed trace, checked and bounded; None when it
    is not a trace of the known format."""
    if not isinstance(trace, dict) or trace.get("format") != HELD_BY_FORMAT \
            or isinstance(trace.get("format"), bool):
        return None
    culprit = trace.get("culprit")
    if not isinstance(culprit, dict):
        return None
    kind, name = culprit.get("kind"), culprit.get("name")
    if not (isinstance(kind, str) and isinstance(name, str)) or len(kind) > MAX_NAME_CHARS \
            or len(name) > MAX_NAME_CHARS:
        return None
    held = trace.get("held_by")
    if not isinstance(held, list):
        return None
    entries = []
    for entry in held[:MAX_ENTRIES_READ]:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), list):
            return None
        path = entry["path"]
        if not all(isinstance(hop, str) for hop in path[:MAX_PATH_HOPS]):
            return None
        instances = _count(entry.get("instances"))
        if instances is None:
            return None
        entries.append({"path": [_text(hop) for hop in path[:MAX_PATH_HOPS]], "instances": instances,
                        "sampled": _count(entry.get("sampled")),
                        "hops": clean_hops(entry.get("hops"), path[:MAX_PATH_HOPS])})
        for field in ("items_per_step", "item_bytes"):  # a container's growth as the watch measured it
            number = entry.get(field)
            if isinstance(number, (int, float)) and not isinstance(number, bool) and math.isfinite(number) \
                    and number >= 0:
                entries[-1][field] = float(number)
    out = {"format": HELD_BY_FORMAT, "culprit": {"kind": kind, "name": name}, "held_by": entries}
    for key in _INT_FIELDS:
        out[key] = _count(trace.get(key))
    seconds = trace.get("seconds")
    out["seconds"] = float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) \
        and math.isfinite(seconds) and 0 <= seconds < 1e9 else None
    for key in ("complete", "containers"):
        out[key] = trace.get(key) if isinstance(trace.get(key), bool) else None
    return out


_HOP_KINDS = frozenset({"global", "local", "class_attribute", "class_namespace", "frame_local", "generator_local",
                        "attribute", "key", "dict_key", "item", "cell", "function", "closure", "object", "elided",
                        "text", "registry", "native", "repeat"})
_HOP_TEXT_FIELDS = ("kind", "owner", "name", "where", "key_type", "holds")


def clean_hops(hops, path) -> list[dict]:
    """The typed hops of a path (see ``capture.referrers.hop_text``), checked
    and bounded; a trace written without them (or with hops that are not
    the known shape) has its text hops, each as a ``text`` hop."""
    if isinstance(hops, list) and len(hops) == len(path) and all(isinstance(h, dict) for h in hops):
        out = []
        for hop in hops:
            kind = hop.get("kind")
            if kind not in _HOP_KINDS:
                break
            clean = {key: _text(hop[key]) for key in _HOP_TEXT_FIELDS if isinstance(hop.get(key), str)}
            for field in ("keys", "count", "min_count"):
                number = _count(hop.get(field))
                if number is not None:
                    clean[field] = number
            out.append(clean)
        else:
            return out
    return [{"kind": "text", "name": _text(hop)} for hop in path]


def held_by_entries(trace: dict) -> list[dict]:
    of = trace.get("new") if isinstance(trace.get("new"), int) else trace.get("live")
    out = []
    for entry in trace["held_by"][:MAX_PATHS]:
        out.append({"path": [str(p)[:300] for p in entry["path"][:MAX_PATH_HOPS]],
                    "hops": entry.get("hops") or clean_hops(None, entry["path"][:MAX_PATH_HOPS]),
                    "instances": int(entry["instances"]),
                    "of": int(of) if isinstance(of, int) else None,
                    "sampled": int(entry.get("sampled", 0)) if isinstance(entry.get("sampled"), int) else None})
        for field in ("items_per_step", "item_bytes"):  # a container's growth as the watch measured it
            number = finite_or_none(entry.get(field))
            if number is not None and number >= 0:
                out[-1][field] = number
    if not trace.get("containers"):  # containers arrive ranked by the bytes they add
        out.sort(key=lambda e: -e["instances"])
    return out


def attach(culprits: list, traces: dict[str, dict]) -> set:
    """Give each traced culprit its ``held_by`` and ``trace`` details; returns
    the keys of the traces given."""
    given = set()
    for culprit in culprits:
        key = f"{culprit.kind}:{culprit.name}"
        trace = traces.get(key)
        if trace is None:
            continue
        entries = held_by_entries(trace)
        if not entries:
            continue
        given.add(key)
        culprit.details = dict(culprit.details or {})
        culprit.details["held_by"] = entries
        if trace.get("containers"):
            culprit.details["held_by_containers"] = True
        culprit.details["trace"] = {
            key: trace.get(key) for key in ("step", "live", "new", "new_since_step", "traced", "found", "seconds",
                                            "complete")
        }
    return given


def traced_earlier(traces: dict[str, dict], given: set) -> list[dict]:
    """The traces of culprits the leak watch told while the run trained that
    the run's end does not show (a leak let go before the end, or one that
    stopped growing): what they were, when, and who held them, newest first.
    They explain; they never change a verdict."""
    out = []
    for key, trace in traces.items():
        if key in given:
            continue
        entries = held_by_entries(trace)
        culprit = trace.get("culprit") if isinstance(trace.get("culprit"), dict) else {}
        if not entries or not isinstance(culprit.get("name"), str):
            continue
        out.append({"kind": _text(culprit.get("kind", "")), "name": _text(culprit["name"]),
                    "step": trace.get("step") if isinstance(trace.get("step"), int) else None,
                    "live": trace.get("live") if isinstance(trace.get("live"), int) else None,
                    "held_by": entries})
    out.sort(key=lambda entry: -(entry["step"] or 0))
    return out[:MAX_PATHS]


def lend_earlier(culprits: list, earlier: list[dict], reports_by_tag: dict) -> None:
    """A memory series that leaks with no holder of its own gets the holder
    of a culprit the leak watch traced while the run trained, within the
    series' current stretch of growth (traced at or after its segment
    began): what grew while that memory grew, and who held it (a list of
    tensors a training function's local kept, let go when it returned, so
    that at the end only memory still shows the leak). Said as such in the
    evidence, never as the series' own trace; a verdict never changes."""
    for culprit in culprits:
        details = culprit.details if isinstance(culprit.details, dict) else {}
        if culprit.kind != "series" or culprit.unit != "bytes" or details.get("held_by"):
            continue
        report = reports_by_tag.get(culprit.name)
        trend = getattr(report, "trend", None)
        start = getattr(trend, "onset_step", None)
        for entry in earlier:  # newest first
            step = entry.get("step")
            if isinstance(step, int) and (start is None or step >= start):
                culprit.details = {**details, "held_by": entry["held_by"],
                                   "held_by_via": f"{entry['kind']} {entry['name']}"}
                culprit.evidence = (f"{culprit.evidence}; traced while it trained through "
                                    f"{entry['kind']} {entry['name']} at step {step}")
                break


_CONTAINER_NAMES = frozenset(("list", "tuple", "set", "frozenset", "deque", "OrderedDict", "defaultdict", "dict"))


def _container_of(hop: dict) -> str | None:
    """The container a hop goes through (``list``, ``dict``, ...), or None."""
    kind = hop.get("kind")
    if kind == "item":
        return hop.get("owner")
    if kind in ("key", "dict_key"):
        return "dict"
    if kind == "object" and hop.get("owner") in _CONTAINER_NAMES:
        return hop.get("owner")
    if kind == "text":  # a trace written before hops were typed
        text = str(hop.get("name", "")).partition(" of ")[0]
        if text in _CONTAINER_NAMES:
            return text
        if text.startswith("dict[") or text == "dict (key)":
            return "dict"
    return None


def _holds(hop: dict) -> str:
    """What a container hop at the end of a path holds (``ndarray``), or ''."""
    if isinstance(hop.get("holds"), str):
        return hop["holds"]
    if hop.get("kind") == "text":  # a trace written before hops were typed
        return str(hop.get("name", "")).partition(" of ")[2]
    return ""


# Items of a few dozen bytes each (numbers, and tuples of them): a container
# of them (the last 200 losses, re-read every 50 steps) cannot carry memory
# growth of kilobytes a step, whatever the walks saw of its length.
_ATOMIC_ITEMS = frozenset(("int", "float", "bool", "NoneType", "complex"))


def _atomic(holds: str) -> bool:
    inner = holds[len("tuple("):-1] if holds.startswith("tuple(") and holds.endswith(")") else holds
    return all(part.strip() in _ATOMIC_ITEMS for part in inner.split(","))


def retained_containers(culprits: list) -> list:
    """Containers the leak watch found growing at the heap walks while a
    memory series grew, and traced to a root as that memory's holders: each
    is where the leak accumulates, named by what it retains (``TarFile.members
    → list of TarInfo``). Three walks of a short run see a container grow
    from one walk to the next, where a type's count needs four to be judged
    on its own. Returned as culprits of kind ``container``; the memory series
    is kept (the caller merges culprits held alike). A container of numbers
    is no holder of the memory's growth and leaves its ``held_by``."""
    from tb_leak_plugin.analysis.results import Culprit

    out = []
    for culprit in culprits:
        details = culprit.details if isinstance(culprit.details, dict) else {}
        if culprit.kind == "series" and not details.get("held_by_containers"):
            out += _accumulating(culprit, details)
        if culprit.kind != "series" or not details.get("held_by_containers"):
            continue
        step = (details.get("trace") or {}).get("step")
        kept = [e for e in details.get("held_by") or []
                if not (e.get("hops") and _holds(e["hops"][-1]) and _atomic(_holds(e["hops"][-1])))
                or _holds_the_growth(e, culprit, step)]
        if not kept:
            culprit.details = {k: v for k, v in details.items()
                               if k not in ("held_by", "held_by_containers", "trace")}
            continue
        details["held_by"] = kept
        for entry in details.get("held_by") or []:
            hops = list(entry.get("hops") or [])
            if len(hops) < 2 or not _holds(hops[-1]):
                continue
            added = entry.get("instances")
            when = f" by step {step}" if isinstance(step, int) else ""
            rate = _items_per_step(entry, step)
            out.append(Culprit(
                kind="container", name=" → ".join(entry["path"]), growth_per_step=rate, unit="items",
                evidence=(f"{added:,} items added between heap walks{when}, while {culprit.name} grows"
                          if isinstance(added, int) else f"grew between heap walks while {culprit.name} grows"),
                confidence=culprit.confidence, hint="python_container",
                details={"container_hops": hops, "last_count": None,
                         "held_by": [{**_entry(hops[:-1]), "instances": added if isinstance(added, int) else None}]},
            ))
    return out


def _accumulating(culprit, details: dict) -> list:
    """A memory series traced through a container's items to what they
    hold (``class attribute `Processor.instance_map` → dict[int] →
    Processor.resource_loader → ResourceLoader.gazetteer``, traced from the
    new instances whose arrays hold the growth): the container is where the
    leak accumulates, as a heap analyser names the accumulation point, and
    is named by what it keeps (``dict of Processor``), with the memory's
    growth. One culprit of kind ``container``, from the first path; the
    memory series is kept."""
    from tb_leak_plugin.analysis.results import Culprit

    held = details.get("held_by") or []
    hops = list(held[0].get("hops") or []) if held and isinstance(held[0], dict) else []
    for index in range(1, len(hops) - 1):
        container, after = _container_of(hops[index]), hops[index + 1]
        if not container:
            continue
        owner = after.get("owner") if after.get("kind") in ("attribute", "slot") else None
        if not isinstance(owner, str) or not owner or owner in _CONTAINER_NAMES:
            return []
        last = {"kind": "object", "owner": container, "holds": owner}
        step = (details.get("trace") or {}).get("step")
        when = f" (traced at step {step})" if isinstance(step, int) else ""
        return [Culprit(
            kind="container", name=" → ".join(_entry(hops[:index] + [last])["path"]),
            growth_per_step=culprit.growth_per_step, unit=culprit.unit,
            evidence=f"its {owner} items hold what {culprit.name} grows{when}",
            confidence=culprit.confidence, hint="python_container",
            details={"container_hops": hops[:index] + [last], "last_count": None,
                     "held_by": [{**_entry(hops[:index]), "instances": held[0].get("instances")}]})]
    return []


def _items_per_step(entry: dict, step) -> float | None:
    """A traced container's growth per step: as the watch measured it
    between the walks that saw it, or else since the first heap walk (the
    baseline, at the first sample)."""
    rate = finite_or_none(entry.get("items_per_step"))
    if rate is not None:
        return rate
    added = entry.get("instances")
    return added / step if isinstance(added, int) and isinstance(step, int) and step > 0 else None


# The bytes a container spends on each item beyond the item itself: one
# pointer (a list's slot; a dict's entry is more, so this errs towards not
# naming the container).
_SLOT_BYTES = 8.0


def _holds_the_growth(entry: dict, culprit, step) -> bool:
    """Whether a container of numbers holds at least ``Policy.held_share``
    of its memory series' growth, counted in that series' unit: a number is
    one of Python's blocks, and its bytes and its slot's in bytes. A list of
    losses (one float a step in a run that leaks kilobytes a step) does not;
    a consumer's list of 64 timings a step, the whole of a run's growth,
    does."""
    from tb_leak_plugin.analysis.policy import POLICY

    rate, growth = _items_per_step(entry, step), finite_or_none(culprit.growth_per_step)
    size = finite_or_none(entry.get("item_bytes"))
    if rate is None or growth is None or not growth > 0:
        return False
    if culprit.unit == "blocks":
        held = rate
    elif culprit.unit == "bytes" and size is not None:
        held = rate * (size + _SLOT_BYTES)
    else:
        return False
    return held >= POLICY.held_share * growth


def container_hops(culprit) -> list | None:
    """The hops of a growing container culprit: from its root to the
    container itself (the last hop, with what it holds)."""
    details = culprit.details if isinstance(culprit.details, dict) else {}
    hops = details.get("container_hops")
    return list(hops) if isinstance(hops, list) and hops else None


def _entry(hops: list) -> dict:
    from tb_leak_plugin.metadata import hop_text

    return {"path": [hop_text(h) for h in hops], "hops": hops, "instances": None, "of": None, "sampled": None}


def adopt_containers(culprits: list) -> None:
    """Live arrays or tensors with no trace of their own, and a growing
    container that holds them: the container is where they accumulate."""
    # Growing containers, and those found as holders of a memory series.
    containers = [hops for hops in (container_hops(c) for c in culprits if c.kind == "container") if hops]
    for culprit in culprits:
        if culprit.kind == "series" and (culprit.details or {}).get("held_by_containers"):
            containers += [list(entry["hops"]) for entry in culprit.details["held_by"] if entry.get("hops")]
        elif culprit.kind == "series":
            # Memory traced to the arrays that hold its growth (a local
            # re-bound to a bigger array each step): where live arrays are.
            containers += [list(entry["hops"]) for entry in (culprit.details or {}).get("held_by") or []
                           if entry.get("hops") and _holds(entry["hops"][-1]) == "ndarray"]
    for culprit in culprits:
        if culprit.kind == "object_type":
            # A growing container of this type is where it accumulates: its
            # path comes first, before holders traced from a sample of new
            # instances (a framework's local that holds this step's one).
            short = culprit.name.rsplit(".", 1)[-1]
            for hops in containers:
                if hops and _holds(hops[-1]) == short:
                    held = [h for h in (culprit.details or {}).get("held_by") or [] if list(h.get("hops") or []) != hops]
                    culprit.details = dict(culprit.details or {})
                    culprit.details["held_by"] = [_entry(hops)] + held
                    break
            continue
        if culprit.kind not in ("tensors", "op") or (culprit.details or {}).get("held_by"):
            continue
        # An op whose outputs are never freed, and live tensors: held as
        # EagerTensors; live numpy arrays: as ndarrays.
        wanted = "ndarray" if "numpy" in culprit.name else "EagerTensor"
        for hops in containers:
            if hops and wanted in _holds(hops[-1]):
                culprit.details = dict(culprit.details or {})
                culprit.details["held_by"] = [_entry(hops)]
                culprit.details["held_by_containers"] = True
                break


def holder_key(culprit):
    """The accumulation point of a culprit: its first path up to the first
    container on it (``train() local `history` → list``), or None.

    A growing container's own hops end with the container, so a container
    and the objects it accumulates have the same key."""
    from tb_leak_plugin.metadata import hop_text

    details = culprit.details if isinstance(culprit.details, dict) else {}
    held = details.get("held_by")
    if not held or not held[0].get("path"):
        return None
    hops = list(held[0].get("hops") or [{"kind": "text", "name": p} for p in held[0]["path"]])
    if culprit.kind == "container":
        hops = container_hops(culprit) or hops
    key = []
    for index, hop in enumerate(hops):
        container = _container_of(hop) if index else None
        key.append(("container", container) if container else hop_text(hop))
        if container:
            break
    return tuple(key)


def merge_by_holder(culprits: list) -> list:
    """One culprit per holder: of those whose first path starts at the same
    root and hop, the first (highest ranked) keeps the others in
    ``details["also"]``; except that a container leads a built-in type it
    holds (a dict of a memo cache before the tuples that are its keys: the
    accumulation point is what grows; a class, the program's or a
    library's, is what accumulates and still leads its container)."""
    groups: dict = {}
    order = []
    for culprit in culprits:
        key = holder_key(culprit)
        if key is None:
            order.append([culprit])
        elif key in groups:
            groups[key].append(culprit)
        else:
            groups[key] = [culprit]
            order.append(groups[key])
    out = []
    for group in order:
        lead = group[0]
        if lead.kind == "object_type" and str(lead.name).startswith("builtins."):
            lead = next((c for c in group if c.kind == "container"), lead)
        for culprit in group:
            if culprit is not lead:
                lead.details.setdefault("also", []).append({
                    "kind": culprit.kind, "name": culprit.name,
                    "growth_per_step": finite_or_none(culprit.growth_per_step), "unit": culprit.unit,
                })
        out.append(lead)
    return out
