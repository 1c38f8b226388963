"""The package structure: no import cycles, and each layer imports only the layers below it.

Layers, bottom up: ``hsdag_core`` (graphs, cost graphs, profiles, features,
models: the foundation), ``envs`` (measurement backends and environments),
``policies`` (placement methods), ``hsdag_ray.run`` (a run resolved once and run) and
the commands in ``hsdag_ray`` on top, beside what they share for parsing and printing.
Every import statement counts, including the ones inside functions.
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hsdag_core", "hsdag_ray", "envs", "policies")
#: what each layer may import from the project (itself included)
ALLOWED = {
    "hsdag_core": ("hsdag_core",),
    "envs": ("hsdag_core", "envs"),
    "policies": ("hsdag_core", "envs", "policies"),
    "hsdag_ray": ("hsdag_ray", "hsdag_core", "envs", "policies"),
}


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = f
    return out


def import_graph(root: Path = ROOT) -> nx.DiGraph:
    """Module -> project module it imports (any import statement, at any depth)."""
    modules = project_modules(root)
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import
                    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                    pkg = pkg[: len(pkg) - node.level + 1]
                    base = ".".join(pkg + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            for t in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    g.add_edge(name, t)
    return g


#: the ``python -m hsdag_ray.X`` commands, and what they share for parsing and printing
COMMANDS = ("train", "graph", "measure", "profile", "solve", "apply", "sweep", "pretrain")
SHARED = ("cli", "flags", "arguments", "console", "placed")
#: what of the top of ``hsdag_ray`` the run layer may import: errors, flags and printing
RUN_READS = ("hsdag_ray.cli", "hsdag_ray.flags", "hsdag_ray.console")


def layer(module: str) -> str:
    return module.split(".")[0]


def test_the_graph_sees_the_project():
    g = import_graph()
    # a few imports known to exist, so an empty graph cannot pass the tests below
    assert g.has_edge("hsdag_ray.run.training", "envs.placement_env")
    assert g.has_edge("envs.simulator", "hsdag_core.costgraph")
    assert g.has_edge("policies.hsdag.module", "policies.hsdag.policy")


def test_no_import_cycles():
    g = import_graph()
    cycles = list(nx.simple_cycles(g))
    assert not cycles, "import cycle(s): " + "; ".join(" -> ".join(c + [c[0]]) for c in cycles[:5])


@pytest.mark.parametrize("lower", sorted(ALLOWED))
def test_each_layer_imports_only_the_layers_below(lower):
    g = import_graph()
    bad = [(a, b) for a, b in g.edges if layer(a) == lower and layer(b) not in ALLOWED[lower]]
    assert not bad, f"{lower} imports " + ", ".join(f"{a} -> {b}" for a, b in bad)


def test_a_cycle_is_found(tmp_path):
    # the checker itself: a two-module cycle in a throwaway tree is reported
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "envs" / "a.py").write_text("from envs import b\n")
    (tmp_path / "envs" / "b.py").write_text("def f():\n    from envs.a import x\n")
    g = import_graph(tmp_path)
    assert list(nx.simple_cycles(g)) == [["envs.a", "envs.b"]] or list(nx.simple_cycles(g)) == [["envs.b", "envs.a"]]


def test_the_top_of_hsdag_ray_is_the_commands_and_what_they_share():
    top = {m.split(".")[1] for m in project_modules() if m.count(".") == 1 and m.startswith("hsdag_ray.")}
    assert top == set(COMMANDS) | set(SHARED) | {"run"}, (
        "modules at the top of hsdag_ray that are neither a command nor shared by the commands "
        f"(they belong in hsdag_ray/run/): {sorted(top - set(COMMANDS) - set(SHARED) - {'run'})}")


def test_the_run_layer_imports_no_command():
    g = import_graph()
    bad = [(a, b) for a, b in g.edges if a.startswith("hsdag_ray.run") and b.startswith("hsdag_ray")
           and not b.startswith("hsdag_ray.run") and b not in RUN_READS]
    assert not bad, "the run layer imports above itself: " + ", ".join(f"{a} -> {b}" for a, b in bad)
    assert g.has_edge("hsdag_ray.run.resolve", "hsdag_ray.run.config")  # the graph sees the layer


def test_the_shared_modules_import_no_command():
    g = import_graph()
    bad = [(a, b) for a, b in g.edges if a.split(".")[-1] in SHARED and a.count(".") == 1
           and b.startswith("hsdag_ray.") and b.split(".")[1] in COMMANDS]
    assert not bad, "a shared module imports a command: " + ", ".join(f"{a} -> {b}" for a, b in bad)
