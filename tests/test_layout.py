"""The package's shape: no import cycles (function-local imports included), packages that
import only downward, nothing imported from the repository's scripts or tests, no module past
~400 lines, nothing that cites files outside the repo."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "posx"
# Lowest first: a package may import only itself and those before it (a dotted entry is one
# module of a package whose modules are layers of their own).
LAYERS = [
    "schema.fields",
    "schema.methods",
    "schema.tasks",
    "schema.config",
    "core",
    "rope",
    "model",
    "data",
    "tasks",
    "runs",
    "eval",
    "hf",
    "configure",
    "train",
    "report",
    "cli",
    "__main__",
]
# The repository's folders beside the library: posx runs without them (an installed wheel has none).
OUTSIDE = ("scripts", "benchmarks", "examples", "tests", "helpers", "conftest")


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every posx module ``name`` imports, anywhere in the file (function bodies included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:  # an attribute of a module: the module
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) - {"posx"} for name, path in mods.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_import_graph_sees_function_local_and_relative_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "posx"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("def f():\n    from posx.sub import b\n")
    (pkg / "sub" / "b.py").write_text("from . import a\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    edges = graph()
    assert edges["posx.sub.a"] == {"posx.sub", "posx.sub.b"} and "posx.sub.a" in edges["posx.sub.b"]
    assert find_cycle(edges) is not None


def test_posx_has_no_import_cycles():
    assert find_cycle(graph()) is None


def test_packages_import_only_downward():
    def layer(module: str) -> int:
        """The module's layer: its own entry if LAYERS names it, else its package's; -1 for a
        package whose modules are layers (its ``__init__`` holds only a docstring)."""
        name = module.partition(".")[2]
        if name in LAYERS:
            return LAYERS.index(name)
        if any(entry.startswith(f"{name}.") for entry in LAYERS):
            return -1
        return LAYERS.index(name.split(".")[0])

    upward = [
        (a, b)
        for a, targets in graph().items()
        if a.count(".")
        for b in targets
        if b.count(".") and layer(b) > layer(a)
    ]
    assert not upward, upward


# The rooms of posx.report, lowest first: a room imports only itself and those before it (the
# modules at the top of posx.report, posx report's own summary among them, may import any room).
REPORT_ROOMS = ["store", "compare", "figures", "tables"]


def test_only_the_command_line_imports_the_report():
    """Nothing below the CLI (training, evaluation, runs) reads or writes through posx.report."""
    edges = graph()
    importers = {m for m, targets in edges.items() for t in targets if t.startswith("posx.report")}
    assert {m for m in importers if not m.startswith(("posx.report", "posx.cli"))} == set()


def test_the_rooms_of_the_report_import_only_downward():
    def room(module: str) -> int:
        """The room's place in REPORT_ROOMS; -1 outside every room."""
        parts = module.split(".")
        inside = len(parts) > 2 and parts[1] == "report" and parts[2] in REPORT_ROOMS
        return REPORT_ROOMS.index(parts[2]) if inside else -1

    upward = [(a, b) for a, targets in graph().items() if room(a) >= 0 for b in targets if room(b) > room(a)]
    assert not upward, upward
    undocumented = [
        r
        for r in REPORT_ROOMS
        if not ast.get_docstring(ast.parse((PACKAGE / "report" / r / "__init__.py").read_text()))
    ]
    assert not undocumented, undocumented


def test_the_schema_and_the_core_import_nothing_above_them():
    edges = graph()
    ground = {m for m in edges if m.split(".")[:2] == ["posx", "schema"]}
    assert not [t for m in ground for t in edges[m] if t.startswith("posx.") and t not in ground]
    assert not [t for m, ts in edges.items() if m.startswith("posx.core") for t in ts if not t.startswith("posx.core")]
    assert {t for t in edges["posx.rope"]} <= {
        "posx.core",
        "posx.core.errors",
        "posx.core.validate",
        "posx.core.methods",
        "posx.schema.methods",
    }


# Below the command line and the configure package, code reads the schema's dataclasses
# (``posx.configure.compose.typed``), never Hydra's config.
TYPED = ("train", "eval", "data", "model", "hf", "runs")


def hydra_imports(path: Path) -> set[str]:
    """The omegaconf and hydra modules a file imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        found |= {n for n in names if n.split(".")[0] in ("omegaconf", "hydra")}
    return found


def test_hydra_imports_are_seen(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    from omegaconf import DictConfig\nimport hydra.utils\n")
    assert hydra_imports(tmp_path / "a.py") == {"omegaconf", "hydra.utils"}


def test_below_the_command_line_code_reads_typed_sections_not_hydras_config():
    below = {n: p for n, p in modules().items() if n.split(".")[1:2] and n.split(".")[1] in TYPED}
    assert "posx.train.loop" in below and "posx.eval.run" in below
    found = {n: i for n, p in below.items() if (i := hydra_imports(p))}
    assert not found, found


def outside_imports(path: Path) -> set[str]:
    """The modules of the folders beside the library that ``path`` imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return {name for name in found if name.split(".")[0] in OUTSIDE}


def test_the_outside_import_finder_finds_one_in_a_function(tmp_path):
    (tmp_path / "a.py").write_text("import posx\n\ndef f():\n    from scripts.study import claims\n")
    (tmp_path / "b.py").write_text("import scripts_of_mine\nfrom . import scripts\n")
    assert outside_imports(tmp_path / "a.py") == {"scripts.study"}
    assert outside_imports(tmp_path / "b.py") == set()


def test_the_library_imports_nothing_from_the_scripts_or_the_tests():
    found = {name: sorted(names) for name, path in modules().items() if (names := outside_imports(path))}
    assert not found, found


def test_no_module_is_longer_than_about_400_lines():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > 420}
    assert not long, long


def test_nothing_cites_files_that_are_not_in_the_repository():
    root = PACKAGE.parent
    sources = [
        *PACKAGE.rglob("*.py"),
        *(root / "tests").rglob("*.py"),
        *(root / "scripts").rglob("*.py"),
        *(root / "benchmarks").glob("*.py"),
        *(root / "configs").rglob("*.yaml"),
        root / "README.md",
    ]
    needle = "shared/" + "references"  # split, so this file does not cite it
    citing = [str(p) for p in sources if needle in p.read_text(encoding="utf-8")]
    assert not citing, citing


def test_the_command_line_imports_nothing_heavy():
    """``posx --help`` and ``--version`` answer without importing torch, pandas, matplotlib or
    Hydra: ``posx.cli`` imports ``posx.cli.commands``, which needs them, only when a command runs."""
    heavy = ("torch", "pandas", "matplotlib", "hydra", "omegaconf", "numpy")
    code = f"import sys, posx.cli; print(sorted(m for m in sys.modules if m.split('.')[0] in {heavy!r}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_the_commands_that_need_torch_import_no_matplotlib():
    """Only ``posx frequencies`` draws among them (``posx.cli.wavelengths``): training, evaluation,
    export and data preparation start without matplotlib."""
    code = "import sys, posx.cli.commands; print('matplotlib' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"], out


def test_the_code_map_lists_the_layers_in_this_order():
    text = (PACKAGE.parent / "docs" / "code-map.md").read_text(encoding="utf-8")
    intro = text.split("\n\n")[1]  # the paragraph under the title
    sentence = re.split(r"\.\s", intro.split(":", 1)[1])[0]  # a layer's name may hold a dot
    listed = [name.strip().strip("`") for name in sentence.split("→")]
    assert listed == [layer for layer in LAYERS if layer != "__main__"]
