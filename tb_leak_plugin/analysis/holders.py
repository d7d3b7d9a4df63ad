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

from tb_leak_plugin.analysis.results import finite_or_none
from tb_leak_plugin.metadata import HELD_BY_FORMAT

# Held-by entries kept per culprit, and the longest path kept.
MAX_PATHS = 5
MAX_PATH_HOPS = 16


def read_traces(series_list, warnings: list | None = None) -> dict[str, dict]:
    """culprit key (``kind:name``) -> the latest valid trace among ``held_by`` series."""
    latest: dict[str, tuple[int, dict]] = {}
    for series in series_list:
        try:
            trace = json.loads(series.info.detail)
        except (TypeError, ValueError):
            if warnings is not None:
                warnings.append(f"{series.tag}: leak trace is not valid JSON; skipped")
            continue
        if not _valid(trace):
            if warnings is not None:
                warnings.append(f"{series.tag}: leak trace in an unknown or newer format; skipped")
            continue
        key = f"{trace['culprit']['kind']}:{trace['culprit']['name']}"
        step = trace.get("step") if isinstance(trace.get("step"), int) else -1
        if key not in latest or step >= latest[key][0]:
            latest[key] = (step, trace)
    return {key: trace for key, (_step, trace) in latest.items()}


def _valid(trace) -> bool:
    if not isinstance(trace, dict) or trace.get("format") != HELD_BY_FORMAT:
        return False
    culprit = trace.get("culprit")
    if not isinstance(culprit, dict) or not all(isinstance(culprit.get(k), str) for k in ("kind", "name")):
        return False
    held = trace.get("held_by")
    return isinstance(held, list) and all(
        isinstance(h, dict) and isinstance(h.get("path"), list) and all(isinstance(p, str) for p in h["path"])
        and isinstance(h.get("instances"), int) for h in held)


def held_by_entries(trace: dict) -> list[dict]:
    of = trace.get("new") if isinstance(trace.get("new"), int) else trace.get("live")
    out = []
    for entry in trace["held_by"][:MAX_PATHS]:
        out.append({"path": [str(p)[:300] for p in entry["path"][:MAX_PATH_HOPS]],
                    "instances": int(entry["instances"]),
                    "of": int(of) if isinstance(of, int) else None,
                    "sampled": int(entry.get("sampled", 0)) if isinstance(entry.get("sampled"), int) else None})
    if not trace.get("containers"):  # containers arrive ranked by the bytes they add
        out.sort(key=lambda e: -e["instances"])
    return out


def attach(culprits: list, traces: dict[str, dict]) -> None:
    """Give each traced culprit its ``held_by`` and ``trace`` details."""
    for culprit in culprits:
        trace = traces.get(f"{culprit.kind}:{culprit.name}")
        if trace is None:
            continue
        entries = held_by_entries(trace)
        if not entries:
            continue
        culprit.details = dict(culprit.details or {})
        culprit.details["held_by"] = entries
        if trace.get("containers"):
            culprit.details["held_by_containers"] = True
        culprit.details["trace"] = {
            key: trace.get(key) for key in ("step", "live", "new", "new_since_step", "traced", "found", "seconds",
                                            "complete")
        }


_CONTAINER_HOPS = ("list", "tuple", "set", "frozenset", "deque", "OrderedDict", "defaultdict")


def _container_hop(hop: str) -> str | None:
    if hop in _CONTAINER_HOPS:
        return hop
    if hop.startswith("dict[") or hop == "dict (key)" or hop == "dict":
        return "dict"
    return None


def adopt_containers(culprits: list) -> None:
    """Live arrays or tensors with no trace of their own, and a growing
    container that holds them: the container is where they accumulate."""
    # Growing containers, and those found as holders of a memory series.
    containers = [[hop for hop in c.name.split(" → ") if hop] for c in culprits if c.kind == "container"]
    for culprit in culprits:
        if culprit.kind == "series" and (culprit.details or {}).get("held_by_containers"):
            containers += [list(entry["path"]) for entry in culprit.details["held_by"]]
    for culprit in culprits:
        if culprit.kind not in ("tensors", "op") or (culprit.details or {}).get("held_by"):
            continue
        # An op whose outputs are never freed, and live tensors: held as
        # EagerTensors; live numpy arrays: as ndarrays.
        wanted = "ndarray" if "numpy" in culprit.name else "EagerTensor"
        for path in containers:
            if path and wanted in path[-1].partition(" of ")[2]:
                culprit.details = dict(culprit.details or {})
                culprit.details["held_by"] = [{"path": path, "instances": None, "of": None, "sampled": None}]
                culprit.details["held_by_containers"] = True
                break


def holder_key(culprit):
    """The accumulation point of a culprit: its first path up to the first
    container on it (``train() local `history` → list``), or None.

    A growing container's own name is its path and its type, so a container
    and the objects it accumulates have the same key."""
    details = culprit.details if isinstance(culprit.details, dict) else {}
    held = details.get("held_by")
    if not held or not held[0].get("path"):
        return None
    path = list(held[0]["path"])
    if culprit.kind == "container":
        path = [hop for hop in culprit.name.split(" → ") if hop]
    if path:
        path[-1] = path[-1].partition(" of ")[0]  # "list of ndarray" is the list
    key = []
    for index, hop in enumerate(path):
        container = _container_hop(hop) if index else None
        key.append(container or hop)
        if container:
            break
    return tuple(key)


def merge_by_holder(culprits: list) -> list:
    """One culprit per holder: the first of those whose first path starts at
    the same root and hop keeps the others in ``details["also"]``."""
    first: dict = {}
    out = []
    for culprit in culprits:
        key = holder_key(culprit)
        if key is None:
            out.append(culprit)
            continue
        lead = first.get(key)
        if lead is None:
            first[key] = culprit
            out.append(culprit)
            continue
        lead.details.setdefault("also", []).append({
            "kind": culprit.kind, "name": culprit.name, "growth_per_step": finite_or_none(culprit.growth_per_step),
            "unit": culprit.unit,
        })
    return out
