"""The package's shape, as a contributor sees it: commands at the top, stage packages
below, no import cycles (function-local imports count), options asked rather than named,
the preflight free of MindSpore, and modules short enough to read."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ms_exp"
# The commands people and msrun type: python -m ms_exp.<name>.
COMMANDS = {"run", "worker", "eval", "ckpt", "report", "runs"}
MAX_LINES = 450


# Hydra's plugins live beside the package and import it: their imports count too.
PLUGINS = ROOT / "hydra_plugins"


def modules():
    """Module name -> file, for every module of the package and of its Hydra plugins."""
    found = {}
    for path in [*PACKAGE.rglob("*.py"), *PLUGINS.rglob("*.py")]:
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported_modules(name: str, path: Path, known) -> set:
    """The package's modules that ``name`` imports anywhere in its file (module level and
    inside functions alike), each resolved to the deepest module that exists."""
    is_package = path.name == "__init__.py"
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            candidates = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in known:
                candidate = candidate.rpartition(".")[0]
            # A package's own __init__ imported by its children is how packages work.
            if candidate and candidate != name and not name.startswith(candidate + "."):
                targets.add(candidate)
    return targets


def import_graph():
    known = modules()
    return {name: imported_modules(name, path, known) for name, path in known.items()}


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles_counting_function_local_imports():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_sees_a_function_local_cycle(tmp_path, monkeypatch):
    # The check above must be able to fail: a cycle closed only inside a function counts.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    known = {"p.a": tmp_path / "a.py", "p.b": tmp_path / "b.py"}
    known["p.a"].write_text("import p.b\n")
    known["p.b"].write_text("def late():\n    from p import a\n")
    graph = {name: imported_modules(name, path, known) for name, path in known.items()}
    assert cycles(graph) == [["p.a", "p.b"]]


def test_the_top_of_the_package_holds_only_commands():
    top = {path.stem for path in PACKAGE.glob("*.py")} - {"__init__"}
    assert top == COMMANDS
    for name in COMMANDS:
        assert "__main__" in (PACKAGE / f"{name}.py").read_text(), name


def test_no_import_cycle_runs_through_the_hydra_plugins():
    graph = import_graph()
    assert any(name.startswith("hydra_plugins.") for name in graph)
    assert [c for c in cycles(graph) if any(m.startswith("hydra_plugins") for m in c)] == []


def test_no_command_imports_another_command():
    """What two commands share is library (eval merges a sliced run with
    ms_exp/checkpoint/transform.py, as ms_exp.ckpt does), not one command's module."""
    graph = import_graph()
    commands = {f"ms_exp.{name}" for name in COMMANDS}
    offenders = {command: sorted(graph[command] & commands) for command in commands
                 if graph[command] & commands}
    assert offenders == {}


def test_hydras_private_api_is_used_through_one_module():
    """``hydra._internal`` and the global-state helpers of ``hydra.initialize`` change
    between Hydra versions: one module holds every use, and says what it relies on."""
    door = "ms_exp/config/hydra_internals.py"
    users = []
    for path in [*PACKAGE.rglob("*.py"), *PLUGINS.rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.startswith(("hydra._internal", "hydra.initialize")) for n in names):
                users.append(path.relative_to(ROOT).as_posix())
    assert users and set(users) == {door}


def test_the_library_does_not_import_the_commands():
    graph = import_graph()
    commands = {f"ms_exp.{name}" for name in COMMANDS}
    offenders = {module: sorted(targets & commands) for module, targets in graph.items()
                 if module not in commands and targets & commands}
    assert offenders == {}


def test_stages_import_only_earlier_stages_and_leaves():
    """config -> checks (preflight) -> job -> one rank's training (train) -> records, with
    the groups' own packages as leaves: no stage reaches back into a later one."""
    graph = import_graph()
    later = {
        "ms_exp.config": ("ms_exp.preflight", "ms_exp.job", "ms_exp.train", "ms_exp.data",
                          "ms_exp.models", "ms_exp.parallel", "ms_exp.boost",
                          "ms_exp.checkpoint", "ms_exp.placement", "ms_exp.tracking"),
        "ms_exp.preflight": ("ms_exp.job", "ms_exp.train"),
        "ms_exp.train": ("ms_exp.job", "ms_exp.preflight"),
        "ms_exp.data": ("ms_exp.job", "ms_exp.preflight", "ms_exp.train"),
        "ms_exp.models": ("ms_exp.job", "ms_exp.preflight", "ms_exp.train"),
        "ms_exp.parallel": ("ms_exp.job", "ms_exp.preflight", "ms_exp.train"),
        "ms_exp.boost": ("ms_exp.job", "ms_exp.preflight", "ms_exp.train"),
        # Stage one's snapshots are checkpoints: boost reads them, checkpoint never asks boost.
        "ms_exp.checkpoint": ("ms_exp.job", "ms_exp.preflight", "ms_exp.train", "ms_exp.boost"),
        "ms_exp.placement": ("ms_exp.job", "ms_exp.preflight", "ms_exp.train"),
        "ms_exp.tracking": ("ms_exp.job", "ms_exp.preflight", "ms_exp.train"),
    }
    offenders = []
    for module, targets in graph.items():
        for stage, forbidden in later.items():
            if module == stage or module.startswith(stage + "."):
                offenders += [f"{module} -> {target}" for target in targets
                              if target.startswith(forbidden)]
    assert offenders == []


def test_options_are_asked_not_named():
    """What differs between models and boost options comes from their option objects:
    only the models package names a model (and the schemas list the options)."""
    named = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("ms_exp/models/") or relative == "ms_exp/config/schema.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if '== "wide_deep"' in line or '!= "wide_deep"' in line or \
                    'mode == "dim_reduce"' in line or 'mode != "dim_reduce"' in line:
                named.append(f"{relative}:{number}: {line.strip()}")
    assert named == []


def test_preflight_refuses_before_mindspore_is_imported():
    """Composing and checking the default config (the launching process's work before any
    run exists) imports no MindSpore."""
    code = ("import sys; from ms_exp.preflight.compose import preflight; preflight([]); "
            "print('mindspore' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")),
                         ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_every_module_says_its_job_and_stays_short(path):
    tree = ast.parse(path.read_text())
    docstring = ast.get_docstring(tree)
    assert docstring, f"{path} has no module docstring saying what it is for"
    lines = len(path.read_text().splitlines())
    if lines > MAX_LINES:
        # A longer module must be one cohesive thing, and say so.
        assert "one cohesive" in docstring.lower(), \
            f"{path}: {lines} lines; split it, or say in its docstring why it is one cohesive thing"
