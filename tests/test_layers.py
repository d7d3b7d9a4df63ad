"""The package's layers: no import cycles, a small flat top level, and the
public imports that users and entry points rely on.

Imports are read from the source with ``ast`` (module level and inside
functions alike), so a cycle hidden behind a function-level import fails too.
"""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "tb_leak_plugin"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import submodule` depends on the submodule, not on pkg's names.
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    targets.append(submodule if submodule in modules else node.module)
            for target in targets:
                if target in modules and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def _cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles():
    graph = _import_graph()
    # A package's __init__ importing its own submodules is not a layering
    # cycle; ours import nothing, so every edge counts.
    assert _cycles(graph) == []


def test_top_level_stays_small():
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(flat) <= 10, flat


def test_lower_layers_never_import_higher_ones():
    order = ["tb_leak_plugin.analysis", "tb_leak_plugin.eventfile", "tb_leak_plugin.reporting",
             "tb_leak_plugin.plugin"]
    forbidden = {
        "tb_leak_plugin.analysis": ("tb_leak_plugin.eventfile", "tb_leak_plugin.reporting", "tb_leak_plugin.plugin",
                                    "tb_leak_plugin.capture"),
        "tb_leak_plugin.eventfile": ("tb_leak_plugin.reporting", "tb_leak_plugin.plugin", "tb_leak_plugin.capture"),
        "tb_leak_plugin.xplane": ("tb_leak_plugin.analysis", "tb_leak_plugin.reporting", "tb_leak_plugin.plugin",
                                  "tb_leak_plugin.capture"),
        "tb_leak_plugin.reporting": ("tb_leak_plugin.plugin", "tb_leak_plugin.capture"),
        # The monitor runs the analysis on the run so far to confirm a leak
        # while the loop runs (capture/online.py); the analysis never imports it.
        "tb_leak_plugin.capture": ("tb_leak_plugin.reporting", "tb_leak_plugin.plugin"),
    }
    assert set(order) <= {m.rsplit(".", 1)[0] for m in _import_graph()} | set(order)
    bad = []
    for module, targets in _import_graph().items():
        for layer, banned in forbidden.items():
            if module == layer or module.startswith(layer + "."):
                bad += [(module, t) for t in targets if t.startswith(banned)]
    assert bad == []


@pytest.mark.parametrize("expression", [
    "tb_leak_plugin.Monitor",
    "tb_leak_plugin.summary.memory_pb",
    "tb_leak_plugin.summary.EventWriter",
    "tb_leak_plugin.keras.LeakCallback",
    "tb_leak_plugin.plugin.leak_plugin.LeakPluginLoader",
    "tb_leak_plugin.reporting.cli.main",
])
def test_public_names_resolve(expression):
    import importlib

    module_name, attribute = expression.rsplit(".", 1)
    module = importlib.import_module(module_name)
    assert getattr(module, attribute) is not None
