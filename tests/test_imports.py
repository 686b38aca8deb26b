"""Imports flow one way: patterns <- ir <- planner <- the top level (api, cli, testing);
backends import only ir (and their own package); nothing in the library imports
``tilesparse.testing`` (it needs hypothesis); and there are no import cycles.

Every ``import`` and ``from ... import`` in every module under ``tilesparse/`` is read with
``ast`` (imports inside functions too: a lazy wrong-way import is still wrong-way), resolved
to the module it names; a module belongs to its first package under ``tilesparse``. Cycles
are looked for among imports run at import time (module level), since lazy imports are how
a cycle is legitimately broken. A synthetic tree shows the check catches both kinds of
fault. Packages not named in LAYERS count as top level. ``patterns/`` also holds no slot (a
rebound global, a context variable) through which another layer could plug a kernel into a
criterion. CPU only.
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


def _write_package(tmp_path: Path, files: dict[str, str]) -> Path:
    """A ``tilesparse`` tree under ``tmp_path`` holding ``files`` (path -> text): a package the
    checks must find fault with."""
    pkg = tmp_path / "tilesparse"
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def test_a_wrong_way_edge_and_a_cycle_are_reported(tmp_path):
    pkg = _write_package(tmp_path, {
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
    })  # fmt: skip
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


# the semantics (tilesparse.ir.semantics) and where a copy of them may live: the Triton kernels
# keep a tl.constexpr copy of the key sentinel, checked at import by backends/triton/op.py
SEMANTICS = "ir/semantics.py"
SENTINEL_COPIES = {SEMANTICS, "backends/triton/kernels.py"}
SEMANTIC_FUNCTIONS = {"dense_mask", "element_mask", "keep_element"}


def private_imports(root: Path) -> list[str]:
    """Every ``from X import _name`` where X is in another package than the importer: a
    helper used across packages is public in the module that owns it."""
    found = []
    for path in sorted(root.rglob("*.py")):
        name = module_name(path, root)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ImportFrom) or node.level == 0 and not (node.module or "").startswith(root.name):
                continue
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(anchor + ([node.module] if node.module else []))
            else:
                target = node.module
            target_package = target if _is_package(target, root) else target.rpartition(".")[0]
            private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            if private and target_package != package:
                found.append(f"{name} imports {private} from {target}")
    return found


def _is_package(name: str, root: Path) -> bool:
    return (root / Path(*name.split(".")[1:]) / "__init__.py").is_file()


def semantics_outside_ir(root: Path) -> list[str]:
    """The key sentinel written, or a semantic function defined, outside its owner."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        text = path.read_text()
        if rel not in SENTINEL_COPIES and ("1 << 30" in text or "1<<30" in text):
            found.append(f"{rel} writes the key sentinel 1 << 30 (import KEY_SENTINEL from tilesparse.ir)")
        defined = {n.name for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef)}
        if rel != SEMANTICS and defined & SEMANTIC_FUNCTIONS:
            found.append(f"{rel} defines {sorted(defined & SEMANTIC_FUNCTIONS)} (owned by tilesparse/{SEMANTICS})")
    return found


def test_no_private_helper_is_imported_across_packages():
    assert private_imports(ROOT) == []


def test_the_semantics_have_one_owner():
    assert semantics_outside_ir(ROOT) == []


def test_the_boundary_checks_catch_a_private_import_and_a_copied_sentinel(tmp_path):
    pkg = _write_package(tmp_path, {
        "__init__.py": "",
        "ir/__init__.py": "",
        "ir/prepare.py": "def _select(t):\n    return t\n",
        "ir/semantics.py": "KEY_SENTINEL = 1 << 30\n",
        "ir/inspect.py": "from .prepare import _select\n",  # same package: fine
        "backends/__init__.py": "",
        "backends/index.py": "from ..ir.prepare import _select\nSENTINEL = 1 << 30\n",
        "backends/model.py": "def element_mask(p):\n    return p\n",
    })  # fmt: skip
    assert private_imports(pkg) == ["tilesparse.backends.index imports ['_select'] from tilesparse.ir.prepare"]
    assert semantics_outside_ir(pkg) == [
        "backends/index.py writes the key sentinel 1 << 30 (import KEY_SENTINEL from tilesparse.ir)",
        "backends/model.py defines ['element_mask'] (owned by tilesparse/ir/semantics.py)",
    ]


def kernel_slots_in_patterns(root: Path) -> list[str]:
    """A ``global`` rebinding or a context variable in ``patterns/``: the ways another layer
    could plug a kernel into a criterion at run time (criteria are pure functions of q, k)."""
    found = []
    for path in sorted((root / "patterns").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Global):
                found.append(f"{rel} rebinds a module global: {', '.join(node.names)}")
            elif isinstance(node, ast.Import | ast.ImportFrom) and "contextvars" in (
                [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            ):
                found.append(f"{rel} imports contextvars")
    return found


def test_criteria_hold_no_kernel_slot():
    assert kernel_slots_in_patterns(ROOT) == []


def test_the_kernel_slot_check_catches_a_global_and_a_context_variable(tmp_path):
    pkg = _write_package(tmp_path, {
        "patterns/criteria.py": "from contextvars import ContextVar\n_K = None\n\ndef register(k):\n    global _K\n    _K = k\n",
    })  # fmt: skip
    assert kernel_slots_in_patterns(pkg) == [
        "patterns/criteria.py imports contextvars",
        "patterns/criteria.py rebinds a module global: _K",
    ]
