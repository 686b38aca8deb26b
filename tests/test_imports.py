"""Imports flow one way: patterns <- ir <- planner <- the top level (api, cli, testing);
backends import only ir (and their own package); nothing in the library imports
``tilesparse.testing`` (it needs hypothesis); and there are no import cycles.

Every ``import`` and ``from ... import`` in every module under ``tilesparse/`` is read with
``ast`` (imports inside functions too: a lazy wrong-way import is still wrong-way), resolved
to the module it names; a module belongs to its first package under ``tilesparse``. Cycles
are looked for among imports run at import time (module level), since lazy imports are how
a cycle is legitimately broken. A synthetic tree shows the check catches both kinds of
fault. Packages not named in LAYERS count as top level. CPU only.
"""

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

import tilesparse

ROOT = Path(tilesparse.__file__).parent

# package -> the tilesparse packages it may import (besides itself)
LAYERS: dict[str, set[str]] = {
    "patterns": set(),
    "ir": {"patterns"},
    "backends": {"ir"},
    "planner": {"patterns", "ir", "backends"},
}
LIBRARY_PACKAGES = {"patterns", "ir", "backends", "planner", "api", "inference", "__init__", "__main__", "cli", "bench"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path) -> list[tuple[str, bool]]:
    """(imported tilesparse module, at module level) for every import in ``path``."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    lazy = {id(d) for f in ast.walk(tree) if isinstance(f, functions) for d in ast.walk(f)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # "from pkg import sub" names the submodule when one exists
            targets = [f"{base}.{a.name}" if _is_module(f"{base}.{a.name}", root) else base for a in node.names]
        else:
            continue
        out += [(t, id(node) not in lazy) for t in targets if t == root.name or t.startswith(root.name + ".")]
    return out


def _is_module(name: str, root: Path) -> bool:
    rel = Path(*name.split(".")[1:])
    return (root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file()


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def violations(root: Path) -> list[str]:
    """Every wrong-way import and every import cycle in the package at ``root``."""
    problems = []
    graph = nx.DiGraph()
    for path in sorted(root.rglob("*.py")):
        src = module_name(path, root)
        graph.add_node(src)
        for dst, at_import in imports_of(path, root):
            a, b = layer(src), layer(dst)
            if at_import and dst != src:
                graph.add_edge(src, dst)
            if a == b:
                continue
            if b == "testing" and a != "testing":
                problems.append(f"{src} imports {dst}: the library must not depend on tilesparse.testing")
            elif a in LAYERS and b not in LAYERS[a]:
                allowed = sorted(LAYERS[a]) or "nothing"
                problems.append(f"{src} imports {dst}: {a} may import only {allowed} from tilesparse")
    problems += [f"import cycle: {' -> '.join([*c, c[0]])}" for c in nx.simple_cycles(graph)]
    return problems


def test_imports_flow_one_way_without_cycles():
    assert violations(ROOT) == []


def test_the_walk_sees_every_package_and_real_edges():
    edges = {
        (layer(m), layer(d)) for p in ROOT.rglob("*.py") for d, _ in imports_of(p, ROOT) if (m := module_name(p, ROOT))
    }
    assert {("ir", "patterns"), ("backends", "ir"), ("planner", "backends"), ("api", "planner")} <= edges
    assert {layer(module_name(p, ROOT)) for p in ROOT.rglob("*.py")} >= LIBRARY_PACKAGES - {"cli", "bench"}


def test_a_wrong_way_edge_and_a_cycle_are_reported(tmp_path):
    pkg = tmp_path / "tilesparse"
    files = {
        "__init__.py": "from . import api\n",
        "api.py": "from .planner import plan\n",
        "patterns/__init__.py": "",
        "patterns/specs.py": "from ..ir import lower\n",  # wrong way: patterns -> ir
        "ir/__init__.py": "from .lower import lower\n",
        "ir/lower.py": "from .prepare import prepare\n",
        "ir/prepare.py": "def prepare():\n    from ..testing import specs\n",  # lazy, still wrong
        "ir/cycle_a.py": "from . import cycle_b\n",
        "ir/cycle_b.py": "from .cycle_a import x\n",
        "backends/__init__.py": "from ..patterns import specs\n",  # backends -> patterns
        "planner/__init__.py": "",
        "planner/plan.py": "import tilesparse.api\n",  # planner -> top level
        "testing/__init__.py": "from ..api import compile\n",
    }
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    found = violations(pkg)
    expected = [
        "tilesparse.patterns.specs imports tilesparse.ir.lower: patterns may import only nothing",
        "tilesparse.ir.prepare imports tilesparse.testing: the library must not depend on tilesparse.testing",
        "tilesparse.backends imports tilesparse.patterns.specs: backends may import only ['ir']",
        "tilesparse.planner.plan imports tilesparse.api: planner may import only ['backends', 'ir', 'patterns']",
    ]
    for e in expected:
        assert any(f.startswith(e) for f in found), (e, found)
    cycles = [set(f.removeprefix("import cycle: ").split(" -> ")) for f in found if f.startswith("import cycle")]
    assert sorted(map(sorted, cycles)) == [
        ["tilesparse.api", "tilesparse.planner.plan"],
        ["tilesparse.ir.cycle_a", "tilesparse.ir.cycle_b"],
    ], found
    assert len(found) == len(expected) + 2, found


def test_importing_tilesparse_does_not_import_the_testing_kit():
    code = "import sys, tilesparse; print('tilesparse.testing' in sys.modules, 'hypothesis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_the_testing_kit_exports_what_it_names():
    import tilesparse.testing as kit

    assert set(kit.__all__) >= {"specs", "decisions", "attention_inputs", "assert_equivalent"}
    assert all(callable(getattr(kit, n)) or isinstance(getattr(kit, n), tuple) for n in kit.__all__)
