"""No code outside envs/ branches on a backend's name: what a backend can do is declared
by its kind (envs.backends.BackendKind) and read from there."""
import ast
from pathlib import Path

from envs.backends import BACKENDS

ROOT = Path(__file__).resolve().parents[1]


def name_comparisons(path: Path) -> list[str]:
    """``x == "torch"``, ``x != "simulator"``, ``x in ("hetero", "pipeline")`` ... in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        for op, right in zip(node.ops, node.comparators):
            values = []
            if isinstance(right, ast.Constant):
                values = [right.value]
            elif isinstance(right, (ast.Tuple, ast.List, ast.Set)) and isinstance(op, (ast.In, ast.NotIn)):
                values = [e.value for e in right.elts if isinstance(e, ast.Constant)]
            left = ast.unparse(node.left)
            # a backend's name held in a variable, field or lookup named backend
            names_backend = left.split(".")[-1].startswith("backend") or "'backend'" in left
            if names_backend and any(v in BACKENDS for v in values):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_command_compares_a_backends_name():
    found = []
    for pkg in ("hsdag_ray", "policies", "hsdag_core"):
        for f in sorted((ROOT / pkg).rglob("*.py")):
            found += name_comparisons(f)
    assert not found, "\n".join(found)


def test_the_check_finds_a_comparison():
    bad = ROOT / "tests" / "_backend_names_sample.py"
    try:
        bad.write_text('def f(args, cfg):\n    if args.backend == "torch":\n        pass\n'
                       '    return cfg.get("backend") in ("hetero", "pipeline")\n')
        assert len(name_comparisons(bad)) == 2
    finally:
        bad.unlink()
