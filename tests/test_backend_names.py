"""No code outside the backend packages and the registry branches on a backend's or a graph
source's name: what a backend can do is declared by its kind (envs.backends.BackendKind) and
its graph source (envs.source.GraphSource), and read from there."""
import ast
from pathlib import Path

from envs.backends import BACKENDS

ROOT = Path(__file__).resolve().parents[1]
#: where names may be compared: the registry and the backend packages
OWNERS = ("envs/backends.py", "envs/openvino/", "envs/pytorch/")


def names() -> set[str]:
    """Every backend's name and every graph source's."""
    return set(BACKENDS) | {kind.graph.name for kind in BACKENDS.values()}


def _constants(node) -> list:
    """The string constants ``node`` is or holds (a tuple, list or set of them)."""
    if isinstance(node, ast.Constant):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return []


def name_uses(path: Path, known: set[str], root: Path = ROOT) -> list[str]:
    """Comparisons with a name on either side (``==``, ``!=``, ``in`` a tuple), dict keys,
    ``startswith``/``endswith`` and argparse ``choices`` holding one, in ``path``. A word that
    is also a backend's name but means something else there (``exact_start``'s ``auto``)
    says so on its line: ``# not a backend name: WHAT IT IS``."""
    found, text = [], path.read_text()
    lines = text.splitlines()

    def hit(node, values) -> None:
        if "# not a backend name: " in lines[node.lineno - 1]:
            return
        if any(isinstance(v, str) and v in known for v in values):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)[:120]}")

    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Compare):
            hit(node, [v for side in (node.left, *node.comparators) for v in _constants(side)])
        elif isinstance(node, ast.Dict):
            hit(node, [k.value for k in node.keys if isinstance(k, ast.Constant)])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("startswith", "endswith"):
                hit(node, [v for a in node.args for v in _constants(a)])
            for kw in node.keywords:
                if kw.arg == "choices":
                    hit(node, _constants(kw.value))
    return found


def _checked_files():
    for pkg in ("hsdag_ray", "policies", "hsdag_core", "envs"):
        for f in sorted((ROOT / pkg).rglob("*.py")):
            rel = f.relative_to(ROOT).as_posix()
            if not any(rel == o or rel.startswith(o) for o in OWNERS if o.endswith("/")) \
                    and rel not in OWNERS:
                yield f


def test_no_code_outside_the_backends_branches_on_a_backend_or_source_name():
    known, found = names(), []
    for f in _checked_files():
        found += name_uses(f, known)
    assert not found, "\n".join(found)


def test_the_check_finds_each_kind_of_use(tmp_path):
    bad = tmp_path / "sample.py"
    bad.write_text('def f(args, cfg, ap, source):\n'
                   '    if args.backend == "torch":\n'          # a comparison
                   '        pass\n'
                   '    if "openvino" != source.name:\n'        # the name on the left
                   '        pass\n'
                   '    ap.add_argument("--b", choices=("auto", "torch"))\n'
                   '    x = {"openvino": 1, "other": 2}\n'       # a dict key
                   '    y = cfg.name.startswith("simulator")\n'
                   '    z = cfg.start == "auto"  # not a backend name: a setting\'s value\n'
                   '    return cfg.get("kind") in ("hetero", "pipeline")\n')
    assert len(name_uses(bad, names(), tmp_path)) == 6
