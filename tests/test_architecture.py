"""The package's shape, as a contributor sees it: commands at the top, every package on a
level importing only its own level and lower ones, no import cycles (function-local imports
count), options asked rather than named, the preflight free of MindSpore, and modules short
enough to read."""

import ast
import functools
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import parsed

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ms_exp"
# The commands people and msrun type: python -m ms_exp.<name>.
COMMANDS = {"run", "worker", "eval", "ckpt", "report", "runs"}
# Counted in ruff format's layout (one argument per line where a call does not fit).
MAX_LINES = 500


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
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
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


@functools.lru_cache(maxsize=None)
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
    offenders = {
        command: sorted(graph[command] & commands)
        for command in commands
        if graph[command] & commands
    }
    assert offenders == {}


def test_hydras_private_api_is_used_through_one_module():
    """``hydra._internal`` and the global-state helpers of ``hydra.initialize`` change
    between Hydra versions: one module holds every use, and says what it relies on."""
    door = "ms_exp/config/hydra_internals.py"
    users = []
    for path in [*PACKAGE.rglob("*.py"), *PLUGINS.rglob("*.py")]:
        for node in ast.walk(parsed(path)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n.startswith(("hydra._internal", "hydra.initialize")) for n in names):
                users.append(path.relative_to(ROOT).as_posix())
    assert users and set(users) == {door}


def test_the_library_does_not_import_the_commands():
    graph = import_graph()
    commands = {f"ms_exp.{name}" for name in COMMANDS}
    offenders = {
        module: sorted(targets & commands)
        for module, targets in graph.items()
        if module not in commands and targets & commands
    }
    assert offenders == {}


# Every package of ms_exp (and Hydra's plugins beside it) on one level, lowest first: a
# module imports only modules of its own level or lower, and no two packages import each
# other. Hydra finds the launcher and sweeper classes only in the ``hydra_plugins`` namespace
# package, and misses an editable install's plugins unless ms_exp registers the classes
# (docs/design.md#editable-plugin-discovery): so ms_exp imports hydra_plugins, which imports
# ms_exp. That triangle runs down when the registering sits with composing (preflight), above
# the plugins, and the plugins above the search and pool code they wrap.
LEVELS = (
    {"config"},  # schemas, one-line errors, a saved config read back
    {"tracking"},  # the MLflow record: every group reads or writes it, it asks none
    {"data", "placement", "models", "parallel", "checkpoint", "boost"},  # the groups
    {"pool", "search"},  # what a sweep's jobs run on and are sampled by
    {"hydra_plugins"},  # the classes Hydra instantiates, wrapping pool and search
    {"preflight"},  # composing as Hydra will, and checking every job
    {"train"},  # one rank's training
    {"job"},  # a run: its ranks, folders and records
    {"ms_exp", *COMMANDS},  # the commands, and the package's front door (ms_exp.autolog)
)


def package_of(module: str) -> str:
    """``ms_exp.search.trial`` -> ``search``; ``ms_exp.run`` -> ``run``; a plugin module ->
    ``hydra_plugins``."""
    parts = module.split(".")
    return parts[0] if parts[0] != "ms_exp" or len(parts) == 1 else parts[1]


def level_of(package: str) -> int:
    return next(number for number, level in enumerate(LEVELS) if package in level)


def upward_imports(graph) -> list:
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if level_of(package_of(target)) > level_of(package_of(module))
    )


def packages_importing_each_other(graph) -> list:
    arrows = {
        (package_of(module), package_of(target))
        for module, targets in graph.items()
        for target in targets
    }
    return sorted((a, b) for a, b in arrows if a < b and (b, a) in arrows)


def test_every_package_has_a_level():
    placed = set().union(*LEVELS)
    packages = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert packages <= placed, f"give {sorted(packages - placed)} a level in LEVELS"
    assert {package_of(module) for module in import_graph()} <= placed


def test_every_import_runs_down_the_levels():
    graph = import_graph()
    assert upward_imports(graph) == []
    assert packages_importing_each_other(graph) == []


def test_the_level_checks_see_an_upward_import_and_a_pair():
    # The checks above must be able to fail: config asking the job, data and models both ways.
    assert upward_imports({"ms_exp.config.a": {"ms_exp.job.b"}, "ms_exp.job.b": set()}) == [
        "ms_exp.config.a -> ms_exp.job.b"
    ]
    graph = {
        "ms_exp.data.a": {"ms_exp.models.b"},
        "ms_exp.models.b": {"ms_exp.data.c"},
        "ms_exp.data.c": set(),
    }
    assert upward_imports(graph) == []
    assert packages_importing_each_other(graph) == [("data", "models")]


def test_options_are_asked_not_named():
    """What differs between models and boost options comes from their option objects:
    only the models package names a model (and the schemas list the options)."""
    named = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("ms_exp/models/") or relative == "ms_exp/config/schema.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if (
                '== "wide_deep"' in line
                or '!= "wide_deep"' in line
                or 'mode == "dim_reduce"' in line
                or 'mode != "dim_reduce"' in line
            ):
                named.append(f"{relative}:{number}: {line.strip()}")
    assert named == []


def test_preflight_refuses_before_mindspore_is_imported():
    """Composing and checking the default config (the launching process's work before any
    run exists) imports no MindSpore."""
    code = (
        "import sys; from ms_exp.preflight.compose import preflight; preflight([]); "
        "print('mindspore' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.relative_to(PACKAGE).as_posix()
)
def test_every_module_says_its_job_and_stays_short(path):
    tree = parsed(path)
    docstring = ast.get_docstring(tree)
    assert docstring, f"{path} has no module docstring saying what it is for"
    lines = len(path.read_text().splitlines())
    if lines > MAX_LINES:
        # A longer module must be one cohesive thing, and say so.
        assert "one cohesive" in docstring.lower(), (
            f"{path}: {lines} lines; split it, or say in its docstring why it is one cohesive thing"
        )


def test_only_tracking_imports_mlflow():
    """MLflow has one door, ms_exp.tracking: the rest of the package asks it for a client,
    a run's records and MLflow's refusals as ms_exp's own errors (ms_exp/tracking/store.py,
    records.py, mlmodel.py), so a second store or a test double is one class. Imports inside
    functions count."""
    users = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(parsed(path)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            if any(n == "mlflow" or n.startswith("mlflow.") for n in names):
                users.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}")
    assert any(user.startswith("ms_exp/tracking/") for user in users)  # the scan sees them
    assert [user for user in users if not user.startswith("ms_exp/tracking/")] == []


def class_methods(path: Path, name: str) -> set:
    tree = parsed(path)
    found = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    return {n.name for n in found.body if isinstance(n, ast.FunctionDef)}


def test_only_tracking_calls_mlflows_client():
    """Above tracking, a store is read through ms_exp.tracking.records.RunRecords and a run
    recorded through a RunTracker: a call of any other MlflowClient method (read from
    MLflow's source, not imported) outside ms_exp/tracking is a call past that door."""
    import importlib.util

    client = Path(importlib.util.find_spec("mlflow").origin).parent / "tracking" / "client.py"
    mlflow_methods = class_methods(client, "MlflowClient")
    assert {"get_run", "search_runs", "download_artifacts"} <= mlflow_methods
    ours = class_methods(PACKAGE / "tracking" / "records.py", "RunRecords") | class_methods(
        PACKAGE / "tracking" / "interface.py", "RunTracker"
    )
    calls = [
        f"{path.relative_to(ROOT).as_posix()}:{node.lineno} .{node.func.attr}()"
        for path in [*PACKAGE.rglob("*.py"), *PLUGINS.rglob("*.py")]
        if not path.is_relative_to(PACKAGE / "tracking")
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in mlflow_methods - ours
    ]
    assert calls == []


def defined_names(tree: ast.Module) -> set:
    """Names a module defines or imports at its top level."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def test_the_scripts_beside_the_package_import_names_it_has():
    """benchmarks/, tools/ and examples/ run outside the suite's jobs: a name moved out of a
    module breaks them silently, so each ``from ms_exp.<module> import <name>`` is held
    against the module's own top level (or a submodule of that name)."""
    known = modules()
    missing = []
    for path in [*ROOT.glob("benchmarks/**/*.py"), *ROOT.glob("tools/*.py")]:
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ms_exp"):
                assert node.module in known, f"{path}: no module {node.module}"
                names = defined_names(parsed(known[node.module]))
                missing += [
                    f"{path.relative_to(ROOT)}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name not in names and f"{node.module}.{a.name}" not in known
                ]
    assert missing == []


def test_a_module_above_tracking_reads_a_store_through_a_double_of_run_records(
    tmp_path, monkeypatch
):
    """What the one door buys: resume's lookup of a run's folder runs against a stand-in
    store of one class, no MLflow store behind it."""
    from types import SimpleNamespace

    from ms_exp.checkpoint.resume import ResumeError, run_dir_of
    from ms_exp.tracking.records import NotRecorded, RunRecords

    class Double:
        def run(self, run_id: str) -> SimpleNamespace:
            if run_id != "a" * 32:
                raise NotRecorded("no such run")
            return SimpleNamespace(data=SimpleNamespace(tags={"ms_exp.run_dir": str(tmp_path)}))

    monkeypatch.setattr(RunRecords, "open", classmethod(lambda cls, uri: Double()))
    assert run_dir_of("http://team.example", "a" * 32) == tmp_path
    with pytest.raises(ResumeError, match="no such run in http://team.example"):
        run_dir_of("http://team.example", "b" * 32)
