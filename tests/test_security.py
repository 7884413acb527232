"""Security guarantees: servers bind the loopback address, no config value
reaches a shell, numpy files are never unpickled, checkpoints are never unpickled, a store URI
that holds a credential is found and shown masked.

Behaviour tests feed hostile input (shell metacharacters, pickles whose ``__reduce__`` would
create a marker file) through the project's own code paths and check that the marker never
appears; source scans (``ast``, so a comment or a docstring cannot fool them) check that no
module could do it elsewhere.
"""

import ast
import os
import pickle
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import pytest
from conftest import parsed

from ms_exp.config.errors import InvalidConfig
from ms_exp.job.launch_plan import COMMAND_FILE, msrun_arguments, save_command
from ms_exp.job.supervise import launch
from ms_exp.preflight.compose import compose_config, preflight
from ms_exp.tracking import ui_links
from ms_exp.tracking.store import (
    holds_password,
    masked,
    password_refusal,
    python_command,
    resolve_tracking_uri,
    without_passwords,
)
from ms_exp.tracking.ui_links import ui_command

ROOT = Path(__file__).resolve().parents[1]
# The project's code: what users run (ms_exp) and what maintainers run (benchmarks).
PROJECT_DIRS = ("ms_exp", "benchmarks")
LOOPBACK = "127.0.0.1"
STAGE_TWO = "+experiment=dim_reduce_stage_two"


def project_files(dirs=PROJECT_DIRS) -> List[Path]:
    files = sorted(p for d in dirs for p in (ROOT / d).rglob("*.py"))
    assert files, f"no Python files under {dirs}"
    return files


class Detonator:
    """Unpickling this creates ``marker``: the marker existing proves something unpickled it."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def pickle_file(path: Path, marker: Path) -> Path:
    path.write_bytes(pickle.dumps({"layer1.weight": Detonator(marker)}))
    return path


# Values that create ./PWNED if they ever reach ``sh -c`` (no "/": they also name folders).
MARKER = "PWNED"
SHELL_PAYLOADS = [
    f"; touch {MARKER}",
    f"$(touch {MARKER})",
    f"`touch {MARKER}`",
    f"| touch {MARKER}",
    f"&& touch {MARKER}",
]


def argv_recorder(folder: Path, name: str) -> Path:
    """An executable that writes its arguments, NUL-separated, to $ARGV_FILE."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    script.write_text('#!/bin/sh\nprintf \'%s\\0\' "$@" > "$ARGV_FILE"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


def recorded_argv(path: Path) -> List[str]:
    return path.read_text().split("\0")[:-1]


# ---------------------------------------------------------------------------------------------
# Servers bind 127.0.0.1


def test_printed_mlflow_ui_command_binds_loopback_for_every_local_store(tmp_path):
    """What ms_exp.run and ms_exp.report print after "open it with:"."""
    stores = [
        resolve_tracking_uri(None, tmp_path),
        f"sqlite:///{tmp_path}/other.db",
        f"file://{tmp_path}/mlruns",
        str(tmp_path / "mlruns"),
    ]
    for uri in stores:
        argv = shlex.split(ui_command(uri))
        assert Path(argv[0]).name == "mlflow" and argv[1] == "ui", uri
        assert argv[argv.index("--host") + 1] == LOOPBACK, uri
        assert argv[argv.index("--backend-store-uri") + 1] == uri, uri
    # A remote server is only named, never started.
    remote = ui_command("http://10.1.2.3:5000")
    assert remote == "open http://10.1.2.3:5000 in a browser"


def test_printed_mlflow_ui_command_is_safe_to_paste_into_a_shell(tmp_path, monkeypatch):
    """A tracking.uri full of shell metacharacters reaches ``mlflow`` as one argument."""
    # The printed command names the environment's mlflow by path when the shell would not
    # find it; here it must reach the recorder on PATH instead of starting a server.
    monkeypatch.setattr(ui_links, "mlflow_executable", lambda: "mlflow")
    marker = tmp_path / MARKER
    fake_bin = tmp_path / "bin"
    argv_recorder(fake_bin, "mlflow")
    for payload in SHELL_PAYLOADS:
        uri = f"sqlite:///{tmp_path}/a b{payload}/mlflow.db"
        argv_file = tmp_path / "argv"
        env = {
            **os.environ,
            "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}",
            "ARGV_FILE": str(argv_file),
        }
        subprocess.run(["sh", "-c", ui_command(uri)], env=env, check=True, cwd=tmp_path)
        assert recorded_argv(argv_file) == [
            "ui",
            "--backend-store-uri",
            uri,
            "--host",
            LOOPBACK,
            "--port",
            "5000",
        ]
        assert not marker.exists(), payload


# A run directory or data folder as hostile as a path gets: spaces, both quotes, and every
# payload that would create ./PWNED in a shell.
HOSTILE_DIR = "a b 'q' \"dq\" " + " ".join(SHELL_PAYLOADS)


def pasted_argv(line: str, prefix: str, tmp_path: Path, program: str) -> List[str]:
    """Run the command after ``prefix`` in ``line`` through ``bash -c`` with ``program``
    replaced by a recorder; return the arguments it received."""
    assert prefix in line, line
    command = line.split(prefix, 1)[1]
    fake_bin = tmp_path / "bin"
    argv_recorder(fake_bin, program)
    argv_file = tmp_path / "argv"
    env = {
        **os.environ,
        "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}",
        "ARGV_FILE": str(argv_file),
    }
    subprocess.run(["bash", "-c", command], env=env, check=True, cwd=tmp_path)
    assert not (tmp_path / MARKER).exists(), command
    return recorded_argv(argv_file)


def test_printed_upload_command_is_safe_to_paste_into_a_shell(tmp_path):
    """The journal's ``upload with:`` hint (printed by the job's report and the recorder's
    warnings) reaches python with the run directory as one argument, nothing executed."""
    from ms_exp.tracking.journal import OFFLINE_DIR, offline_note

    run_dir = tmp_path / HOSTILE_DIR / "run"
    journal = run_dir / OFFLINE_DIR / "20261123-000000-1.jsonl"
    for run_id in (None, "abc123"):
        line = offline_note("http://127.0.0.1:9", journal, run_id)
        assert pasted_argv(line, "upload with: ", tmp_path, "python") == [
            "-m",
            "ms_exp.tracking.upload",
            str(run_dir),
        ]


def test_printed_criteo_commands_are_safe_to_paste_into_a_shell(tmp_path, monkeypatch, capsys):
    """``train on it:`` of the converter and ``convert it:`` of the sample writer: the
    folder reaches the program as one argument, and Hydra reads the path back verbatim."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from ms_exp.data.criteo_convert import train_command
    from ms_exp.data.criteo_sample import main as sample_main

    out_dir = str(tmp_path / HOSTILE_DIR / "criteo")
    argv = pasted_argv(
        f"train on it: {train_command(out_dir)}", "train on it: ", tmp_path, "python"
    )
    assert argv[:4] == ["-m", "ms_exp.run", "model=wide_deep", "dataset=criteo"]
    assert OverridesParser.create().parse_override(argv[4]).value() == out_dir

    (tmp_path / HOSTILE_DIR).mkdir(exist_ok=True)
    monkeypatch.chdir(tmp_path / HOSTILE_DIR)
    out_file = tmp_path / HOSTILE_DIR / "sample.txt"
    assert sample_main([str(out_file), "--lines", "5"]) == 0
    line = next(
        text for text in capsys.readouterr().out.splitlines() if text.startswith("convert it: ")
    )
    assert pasted_argv(line, "convert it: ", tmp_path, "python") == [
        "-m",
        "ms_exp.data.criteo_convert",
        str(out_file),
        "OUT_DIR",
    ]


def test_printed_mlflow_ui_command_runs_without_an_activated_environment(monkeypatch):
    """Pasted into a shell whose PATH lacks the virtual environment, the command still runs
    the environment's own mlflow; with the environment activated it is plain ``mlflow``."""
    own = str(Path(sys.executable).parent / "mlflow")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert shlex.split(ui_command("sqlite:///x.db"))[0] == own
    monkeypatch.setenv("PATH", f"{Path(own).parent}:/usr/bin:/bin")
    assert shlex.split(ui_command("sqlite:///x.db"))[0] == "mlflow"


def test_printed_python_command_runs_without_an_activated_environment(monkeypatch):
    """``python -m ms_exp...`` lines (report again, merge, evaluate) run this environment's
    interpreter in the shell they are printed in, activated or not: ``python`` where that
    shell's PATH finds it by the name, else its path."""
    # Every virtual environment has bin/python; sys.executable may be its python3.
    own = Path(sys.executable).parent / "python"
    monkeypatch.setattr(sys, "executable", str(own))
    for path, printed in (("/usr/bin:/bin", str(own)), (f"{own.parent}:/usr/bin:/bin", "python")):
        monkeypatch.setenv("PATH", path)
        assert shlex.split(python_command()) == [printed]
        ran = subprocess.run(
            f"{python_command()} -c 'import sys; print(sys.prefix)'",
            shell=True,
            env={"PATH": path},
            capture_output=True,
            text=True,
        )
        assert ran.stdout.strip() == sys.prefix, (path, ran.stderr)


@pytest.mark.parametrize("parallel", ["data", "semi_auto", "auto"])
def test_msrun_master_addr_defaults_to_loopback(parallel, tmp_path):
    """The msrun line ms_exp runs and saves in launch_command.sh: scheduler on 127.0.0.1."""
    cfg = compose_config([f"parallel={parallel}"])
    assert f"--master_addr={LOOPBACK}" in msrun_arguments(cfg.parallel, tmp_path)
    line = save_command(cfg.parallel, tmp_path)
    assert f"--master_addr={LOOPBACK}" in shlex.split(line)
    assert line in (tmp_path / COMMAND_FILE).read_text()


def test_msrun_keeps_a_user_given_master_addr(tmp_path):
    cfg = compose_config(["parallel=data", "parallel.launcher.master_addr=10.0.0.5"])
    assert "--master_addr=10.0.0.5" in msrun_arguments(cfg.parallel, tmp_path)
    assert "--master_addr=10.0.0.5" in shlex.split(save_command(cfg.parallel, tmp_path))


def _string_elements(node: ast.AST) -> List[str]:
    return [
        e.value
        for e in getattr(node, "elts", [])
        if isinstance(e, ast.Constant) and isinstance(e.value, str)
    ]


def _docstrings(tree: ast.AST) -> set:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


# "mlflow ui", "mlflow server --port 1", "python -m http.server": not "mlflow server did not".
SERVER_COMMAND = re.compile(r"\bmlflow (ui|server)(\s+-|\s*$)|http\.server")


def server_commands_without_loopback(source: str, strings: bool = True, path=None) -> List[str]:
    """Server commands in code that do not pass ``--host 127.0.0.1``: argument lists, and
    with ``strings`` command lines in strings (not docstrings). A file that never names
    mlflow or http.server holds none, and is not walked."""
    if not re.search(r"mlflow|http\.server", source):
        return []
    tree = parsed(path) if path else ast.parse(source)
    docs, parts = _docstrings(tree), set()
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)):
            words = _string_elements(node)
            if "mlflow" in words and ({"server", "ui"} & set(words)):
                host = words.index("--host") if "--host" in words else -1
                if host < 0 or words[host + 1 : host + 2] != [LOOPBACK]:
                    bad.append(f"line {node.lineno}: {words}")
            if "http.server" in words:
                bad.append(f"line {node.lineno}: {words}")
        if not strings:
            continue
        if isinstance(node, ast.JoinedStr):
            parts.update(id(value) for value in node.values)
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if (
            id(node) not in docs
            and id(node) not in parts
            and SERVER_COMMAND.search(text)
            and f"--host {LOOPBACK}" not in text
        ):
            bad.append(f"line {node.lineno}: {text!r}")
    return bad


def test_no_server_in_the_project_binds_anything_but_loopback():
    """Every mlflow server/ui command ms_exp and benchmarks start or print, and every one
    the tests start, passes --host 127.0.0.1; no code, config file or doc names 0.0.0.0;
    no module serves HTTP itself."""
    assert server_commands_without_loopback('["mlflow", "server", "--port", "5000"]')
    assert server_commands_without_loopback('x = f"mlflow ui --backend-store-uri {u}"')
    assert not server_commands_without_loopback('"""Start `mlflow server` by hand."""')
    assert not server_commands_without_loopback('sys.exit("mlflow server did not start")')
    found = {}
    for path in project_files((*PROJECT_DIRS, "tests")):
        if path.name == Path(__file__).name:
            continue
        # Tests may quote a printed command to check it; only what they start counts.
        bad = server_commands_without_loopback(
            path.read_text(), strings=path.parent.name != "tests", path=path
        )
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    assert found == {}
    texts = [
        *project_files((*PROJECT_DIRS, "tests")),
        *(ROOT / "conf").rglob("*.yaml"),
        ROOT / "README.md",
    ]
    assert [
        str(p) for p in texts if p.name != Path(__file__).name and "0.0.0.0" in p.read_text()
    ] == []
    servers = {"http.server", "socketserver", "wsgiref.simple_server", "xmlrpc.server"}
    assert [(str(p), m) for p in project_files() for m in imported_modules(p) if m in servers] == []


# ---------------------------------------------------------------------------------------------
# No config value reaches a shell


def _hostile_parallel(tmp_path: Path):
    payloads = SHELL_PAYLOADS
    # Hydra's override grammar: single-quoted strings keep ; $( ` | & as they are.
    cfg = compose_config(
        [
            "parallel=data",
            f"parallel.launcher.master_addr='127.0.0.1{payloads[0]}'",
            f"parallel.launcher.log_dir='logs{''.join(payloads[1:])}'",
        ]
    )
    assert cfg.parallel.launcher.master_addr == f"127.0.0.1{payloads[0]}"
    run_dir = tmp_path / f"run{payloads[1]}"
    run_dir.mkdir()
    return cfg.parallel, run_dir


def test_shell_metacharacters_in_config_reach_msrun_verbatim(tmp_path, monkeypatch):
    """launch() starts msrun with an argument list: every value arrives as it was typed."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / MARKER
    parallel, run_dir = _hostile_parallel(tmp_path)
    argv_file = tmp_path / "argv"
    # Stand in for the interpreter launch() starts msrun with (`python -m mindspore...`).
    monkeypatch.setattr(sys, "executable", str(argv_recorder(tmp_path / "bin", "python3")))
    launch(parallel, run_dir, {"ARGV_FILE": str(argv_file)})
    assert recorded_argv(argv_file) == [
        "-m",
        "mindspore.parallel.cluster.run",
        *msrun_arguments(parallel, run_dir),
    ]
    assert any("touch" in arg for arg in recorded_argv(argv_file))
    assert not marker.exists()


def test_shell_metacharacters_in_config_are_quoted_in_the_saved_msrun_command(tmp_path):
    """Running the saved launch_command.sh hands msrun the values verbatim, runs nothing
    else."""
    marker = tmp_path / MARKER
    parallel, run_dir = _hostile_parallel(tmp_path)
    save_command(parallel, run_dir)
    fake_bin = tmp_path / "bin"
    argv_recorder(fake_bin, "msrun")
    argv_file = tmp_path / "argv"
    env = {
        **os.environ,
        "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}",
        "ARGV_FILE": str(argv_file),
    }
    subprocess.run(["bash", str(run_dir / COMMAND_FILE)], env=env, check=True, cwd=tmp_path)
    assert recorded_argv(argv_file) == msrun_arguments(parallel, run_dir)
    assert not marker.exists()


def imported_modules(path: Path) -> Iterator[str]:
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _aliases(tree: ast.AST) -> Dict[str, str]:
    """Local name -> dotted name it was imported as (``import subprocess as sp``: sp)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.AST, aliases: Dict[str, str]) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(aliases.get(node.id, node.id))
    return ".".join(reversed(parts))


def calls(tree: ast.AST) -> Iterator[Tuple[str, ast.Call]]:
    aliases = _aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield _dotted(node.func, aliases), node


SHELL_CALLS = {
    "os.system",
    "os.popen",
    "subprocess.getoutput",
    "subprocess.getstatusoutput",
    "pty.spawn",
    "asyncio.create_subprocess_shell",
    "commands.getoutput",
}
PROCESS_CALLS = {
    "subprocess.run",
    "subprocess.Popen",
    "subprocess.call",
    "subprocess.check_call",
    "subprocess.check_output",
}


def _is_text(node: ast.AST) -> bool:
    """A str literal, an f-string, str formatting or joining: a command line, not a list."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _is_text(node.left) or _is_text(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if _dotted(node.func, {}) == "shlex.join":
            return True
        return node.func.attr in ("format", "join") and isinstance(
            node.func.value, (ast.Constant, ast.JoinedStr)
        )
    return False


def shell_uses(source: str, tree: Optional[ast.Module] = None) -> List[str]:
    """Every way ``source`` (parsed: ``tree``) could hand text to a shell, by line."""
    tree = tree or ast.parse(source)
    assigned: Dict[str, List[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.setdefault(target.id, []).append(node.value)
        elif isinstance(node, (ast.AnnAssign, ast.arg)) and node.annotation is not None:
            name = (
                node.target.id
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                else getattr(node, "arg", None)
            )
            if name and isinstance(node.annotation, ast.Name) and node.annotation.id == "str":
                assigned.setdefault(name, []).append(ast.Constant(""))
    bad = []
    for name, call in calls(tree):
        for keyword in call.keywords:
            if keyword.arg == "shell" and not (
                isinstance(keyword.value, ast.Constant) and keyword.value.value is False
            ):
                bad.append(f"line {call.lineno}: {name}(shell=...)")
        if name in SHELL_CALLS or name.startswith(("os.exec", "os.spawn", "os.posix_spawn")):
            bad.append(f"line {call.lineno}: {name}")
        if name in PROCESS_CALLS:
            command = (
                call.args[0]
                if call.args
                else next((k.value for k in call.keywords if k.arg == "args"), None)
            )
            values = assigned.get(command.id, []) if isinstance(command, ast.Name) else [command]
            if any(v is not None and _is_text(v) for v in values):
                bad.append(f"line {call.lineno}: {name} with a string command")
    return bad


def test_the_shell_scan_catches_shell_use_and_ignores_comments():
    assert shell_uses("import subprocess\nsubprocess.run('ls', shell=True)")
    assert shell_uses("import subprocess as sp\nsp.Popen(f'msrun {x}')")
    assert shell_uses("from subprocess import run\nline = ' '.join(a)\nrun(line)")
    assert shell_uses("def f(line: str):\n    import subprocess\n    subprocess.call(line)")
    assert shell_uses("import os\nos.system('ls')")
    assert shell_uses("from os import popen\npopen('ls')")
    assert not shell_uses(
        "import subprocess\n# subprocess.run('ls', shell=True)\n"
        "subprocess.run(['ls', '-l'], shell=False)\n"
        "'''os.system(\"ls\")'''"
    )


def test_no_module_hands_a_command_line_to_a_shell():
    """No shell=True, os.system, os.popen, os.exec*/spawn* or subprocess with a string
    command anywhere in ms_exp or benchmarks: processes start from argument lists."""
    started = 0
    found = {}
    for path in project_files():
        tree = parsed(path)
        started += sum(name in PROCESS_CALLS for name, _ in calls(tree))
        bad = shell_uses("", tree)
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    assert found == {}
    assert started >= 5  # launch, provenance, sidecar, benchmarks: the scan sees them


# ---------------------------------------------------------------------------------------------
# numpy files: never unpickled


def _stage_two_weights(path: Path) -> Path:
    """A real MindSpore checkpoint of stage two's network, so validation reaches the PCA."""
    import mindspore as ms

    from ms_exp.data.build import declared_shape
    from ms_exp.data.spec import DataSpec
    from ms_exp.models import create_network

    cfg = compose_config([STAGE_TWO])
    shape, classes = declared_shape(cfg.dataset)
    ms.save_checkpoint(create_network(cfg.model, DataSpec(shape, classes, 0, 0)), str(path))
    return path


def _refusal(*overrides: str) -> str:
    with pytest.raises(InvalidConfig) as refused:
        preflight([STAGE_TWO, "boost.stage_one_run_id=null", *overrides])
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_a_pickled_pca_matrix_is_refused_without_unpickling(tmp_path, monkeypatch):
    """boost.pca_mat_path holding an object array (or a bare pickle) is refused up front,
    naming the key; nothing is unpickled, not by ms_exp and not by the np.load MindSpore's
    AutoBoost later calls on that path."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "PWNED"
    weights = _stage_two_weights(tmp_path / "stage_one.ckpt")
    objects = tmp_path / "objects.npy"
    np.save(objects, np.array([Detonator(marker)] * 2, dtype=object), allow_pickle=True)
    bare = pickle_file(tmp_path / "bare.npy", marker)
    for matrix in (objects, bare):
        message = _refusal(
            f"boost.pretrained_weight_path={weights}",
            f"boost.pca_mat_path={matrix}",
            "boost.n_components=2",
        )
        assert message.startswith(
            f"boost.pca_mat_path={str(matrix)!r}: not allowed; expected a .npy file of numbers ("
        ), message
        with pytest.raises(ValueError):
            np.load(matrix)  # numpy's default, as mindspore.boost.base reads the matrix
        assert not marker.exists()


def test_every_np_load_refuses_pickles_explicitly():
    """Each np.load in ms_exp and benchmarks passes allow_pickle=False itself."""
    loads, found = 0, []
    for path in project_files():
        for name, call in calls(parsed(path)):
            if name in ("numpy.load", "np.load") or name.endswith(".numpy.load"):
                loads += 1
                flag = next((k.value for k in call.keywords if k.arg == "allow_pickle"), None)
                if not (isinstance(flag, ast.Constant) and flag.value is False):
                    found.append(f"{path.relative_to(ROOT)}:{call.lineno}")
            if name in ("pickle.load", "pickle.loads", "numpy.lib.format.read_array"):
                found.append(f"{path.relative_to(ROOT)}:{call.lineno}: {name}")
    assert found == []
    assert loads >= 1  # ms_exp/boost/checks.py reads the PCA matrix's header


# ---------------------------------------------------------------------------------------------
# Checkpoints: never unpickled


def test_mindspore_load_checkpoint_parses_rather_than_unpickles(tmp_path):
    """The one checkpoint reader every ms_exp path uses (``mindspore.load_checkpoint``,
    a protobuf parser) refuses a pickle, naming the file, without running it."""
    import mindspore as ms

    marker = tmp_path / "PWNED"
    evil = pickle_file(tmp_path / "checkpoint-1_1.ckpt", marker)
    with pytest.raises(ValueError, match=f"Failed to read the checkpoint file {evil}"):
        ms.load_checkpoint(str(evil))
    assert not marker.exists()


def test_a_pickled_stage_one_checkpoint_is_refused_without_unpickling(tmp_path, monkeypatch):
    """boost.pretrained_weight_path and the snapshots in boost.weight_load_dir."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "PWNED"
    evil = pickle_file(tmp_path / "final.ckpt", marker)
    message = _refusal(f"boost.pretrained_weight_path={evil}")
    assert message.startswith(
        f"boost.pretrained_weight_path={str(evil)!r}: not allowed; expected a "
    ), message
    assert "MindSpore checkpoint" in message
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    snapshot = pickle_file(snapshots / "snapshot-1_1.ckpt", marker)
    weights = _stage_two_weights(tmp_path / "stage_one.ckpt")
    message = _refusal(
        f"boost.pretrained_weight_path={weights}",
        f"boost.weight_load_dir={snapshots}",
        "boost.n_components=1",
    )
    assert message.startswith(
        f"boost.weight_load_dir={str(snapshot)!r}: not allowed; expected a "
    ), message
    assert "MindSpore checkpoint" in message
    assert not marker.exists()


def test_ckpt_merge_refuses_pickled_checkpoints_and_strategy_files(tmp_path, capsys):
    """python -m ms_exp.ckpt merge: one-line error naming the file, exit status 2."""
    from ms_exp.ckpt import main
    from ms_exp.parallel.layout import Layout, write_strategy_file

    marker = tmp_path / "PWNED"
    strategy = write_strategy_file(
        tmp_path / "strategy.ckpt", {"layer1.weight": Layout((2,), (0,), (4,))}
    )
    for rank in (0, 1):
        (tmp_path / "ckpts" / f"rank_{rank}").mkdir(parents=True)
        pickle_file(tmp_path / "ckpts" / f"rank_{rank}" / "checkpoint-1_1.ckpt", marker)
    assert (
        main(
            [
                "merge",
                str(tmp_path / "ckpts"),
                "--strategy",
                str(strategy),
                "--output",
                str(tmp_path / "merged"),
            ]
        )
        == 2
    )
    rank0 = (tmp_path / "ckpts" / "rank_0" / "checkpoint-1_1.ckpt").resolve()
    error = capsys.readouterr().err
    assert error.startswith("ms_exp.ckpt: error: ") and str(rank0) in error, error
    assert error.count("\n") == 1, error
    evil_strategy = pickle_file(tmp_path / "evil_strategy.ckpt", marker)
    assert main(["merge", str(tmp_path / "ckpts"), "--strategy", str(evil_strategy)]) == 2
    assert capsys.readouterr().err.startswith(
        f"ms_exp.ckpt: error: cannot read strategy file (--strategy) {evil_strategy}: "
    )
    assert not marker.exists()
    assert not (tmp_path / "merged").exists()


@pytest.mark.e2e
def test_eval_refuses_a_pickled_checkpoint_without_unpickling(tmp_path):
    """python -m ms_exp.eval --checkpoint <pickle>: fails naming the file, runs nothing."""
    from omegaconf import OmegaConf

    marker = tmp_path / "PWNED"
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "rank_0").mkdir(parents=True)
    cfg = compose_config(
        [
            "dataset=synthetic",
            "checkpoint=none",
            "dataset.num_samples=64",
            "dataset.num_eval_samples=32",
            "tracking.enabled=false",
        ]
    )
    OmegaConf.save(cfg, run_dir / "config.yaml", resolve=True)
    evil = pickle_file(run_dir / "checkpoints" / "rank_0" / "checkpoint-1_1.ckpt", marker)
    done = subprocess.run(
        [sys.executable, "-m", "ms_exp.eval", "--checkpoint", str(evil)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "GLOG_v": "3"},
    )
    assert done.returncode != 0
    assert str(evil) in done.stderr.strip().splitlines()[-1], done.stderr[-2000:]
    assert not marker.exists()


UNPICKLERS = {
    "pickle",
    "cPickle",
    "_pickle",
    "dill",
    "joblib",
    "cloudpickle",
    "shelve",
    "marshal",
    "torch",
}


def test_the_pool_unpickles_only_what_its_own_pipe_brings():
    """The pool's worker and launching process send each other a job and its outcome over
    the pipe between them; every ``cloudpickle.loads`` there reads a ``recv_bytes()``."""
    loads = []
    for path in (ROOT / "ms_exp" / "pool").glob("*.py"):
        for name, call in calls(parsed(path)):
            if name == "cloudpickle.loads":
                (argument,) = call.args
                loads.append(
                    isinstance(argument, ast.Call)
                    and isinstance(argument.func, ast.Attribute)
                    and argument.func.attr == "recv_bytes"
                )
    assert loads and all(loads)


def test_no_module_imports_an_unpickler_or_evaluates_text():
    """ms_exp and benchmarks import no pickle/dill/joblib/cloudpickle/shelve/marshal/torch
    and call no eval, exec or unsafe yaml loader: nothing from a dataset, a run directory or
    a checkpoint is deserialised into code. (Hydra's joblib launcher, conf/hydra/launcher/
    concurrent.yaml, pickles only the in-memory job it hands to its own worker processes;
    ms_exp's pool launcher does the same over the pipe to its workers, checked below.)"""
    found = []
    for path in project_files():
        where = path.relative_to(ROOT)
        found += [
            f"{where}: import {m}"
            for m in imported_modules(path)
            if m.split(".")[0] in UNPICKLERS
            and not (m == "cloudpickle" and where.parts[:2] == ("ms_exp", "pool"))
        ]
        for name, call in calls(parsed(path)):
            if name in (
                "eval",
                "exec",
                "compile",
                "yaml.load",
                "yaml.unsafe_load",
                "yaml.full_load",
                "yaml.load_all",
                "yaml.unsafe_load_all",
            ):
                found.append(f"{where}:{call.lineno}: {name}")
    assert found == []


# ---------------------------------------------------------------------------------------------
# Credentials in a store's URI: found in each form SQLAlchemy, libpq or MLflow would use


CREDENTIAL_NAMES = (
    "password",
    "passwd",
    "pwd",
    "token",
    "access_token",
    "secret",
    "api_key",
    "sslpassword",
)


@pytest.mark.parametrize(
    "uri, shown",
    [
        *[
            (f"mysql://ms_exp@db/mlflow?{name}=s3cret", f"mysql://ms_exp@db/mlflow?{name}=***")
            for name in CREDENTIAL_NAMES
        ],
        (
            "http://127.0.0.1:5000/?x=1&Access_Token=s3cret&y=2",
            "http://127.0.0.1:5000/?x=1&Access_Token=***&y=2",
        ),
        ("HTTPS://127.0.0.1:5000?TOKEN=s3cret", "HTTPS://127.0.0.1:5000?TOKEN=***"),
        # SQLAlchemy decodes the name, and ends the value only at "&".
        (
            "postgresql://ms_exp@db/mlflow?pass%77ord=s3cret",
            "postgresql://ms_exp@db/mlflow?pass%77ord=***",
        ),
        (
            "postgresql://ms_exp@db/mlflow?password=s3cret;x#y&sslmode=require",
            "postgresql://ms_exp@db/mlflow?password=***&sslmode=require",
        ),
        ("postgresql://ms_exp@db/mlflow?password=", "postgresql://ms_exp@db/mlflow?password=***"),
        # libpq's keyword/value string: what follows the password is hidden too.
        ("host=db password=s3cret dbname=mlflow", "host=db password=***"),
        ("host=db password = 's3cret x' dbname=mlflow", "host=db password = ***"),
        # user:password@, as before
        ("http://alice:s3cret@127.0.0.1:5000", "http://alice:***@127.0.0.1:5000"),
        ("http://alice:s3cret/x?y@127.0.0.1:5000", "http://alice:***@127.0.0.1:5000"),
        ("postgresql://ms_exp:s3cret%40x%2Fy@db/mlflow", "postgresql://ms_exp:***@db/mlflow"),
        ("postgresql://ms_exp:${oc.env:S3CRET}@db/mlflow", "postgresql://ms_exp:***@db/mlflow"),
        ("http://alice:@127.0.0.1:5000", "http://alice:***@127.0.0.1:5000"),
        (
            "http://alice:s3cret@127.0.0.1:5000?token=s3cret",
            "http://alice:***@127.0.0.1:5000?token=***",
        ),
        # No credential: accepted as it is.
        ("http://127.0.0.1:5000?foo=1", None),
        ("postgresql://ms_exp@db/mlflow?sslmode=require&passfile=/home/u/.pgpass&tokens=2", None),
        ("sqlite:////tmp/runs/mlflow.db", None),
        ("sqlite:///mlflow.db", None),
        ("host=db user=ms_exp dbname=mlflow", None),
    ],
)
def test_a_credential_in_a_store_uri_is_refused_and_shown_masked(uri, shown):
    refusal = password_refusal("tracking.uri", uri)
    typed = without_passwords(f"override 'tracking.uri={uri}': Hydra's parser says: {uri}; ...")
    if shown is None:
        assert (holds_password(uri), masked(uri), refusal) == (False, uri, None)
        assert uri in typed
        return
    assert holds_password(uri) and masked(uri) == shown
    server = uri.lower().startswith("http")
    assert refusal and refusal.startswith(f"tracking.uri={shown!r}: a password in tracking.uri")
    assert ("MLFLOW_TRACKING_PASSWORD" in refusal, "PGPASSWORD" in refusal) == (server, not server)
    assert "s3cret" not in refusal + typed


def test_the_recorded_command_line_hides_every_password():
    from ms_exp.tracking.provenance import command_line

    line = command_line(
        [
            "dataset.path=https://alice:s3cret@data.example/x",
            "+x.url=https://data.example/y?token=s3cret",
        ]
    )
    assert "s3cret" not in line and line.count("***") == 2


NOTIFY = """import mindspore as ms
class Notify(ms.train.Callback):
    def __init__(self, url=None, token=None, pad_token=None, db_password=None):
        pass
"""


@pytest.mark.parametrize(
    "override, shown",
    [
        ("+trainer.callbacks.x.token=s3cret", "trainer.callbacks.x.token='***'"),
        (
            "+trainer.callbacks.x.url='https://h.example/?token=s3cret'",
            "trainer.callbacks.x.url='https://h.example/?token=***'",
        ),
        # Resolved as config.yaml records it: the environment's value would be written.
        (
            "+trainer.callbacks.x.db_password=${oc.env:S3CRET}",
            "trainer.callbacks.x.db_password='***'",
        ),
    ],
)
def test_a_credential_given_to_a_users_component_is_refused_before_it_is_recorded(
    override, shown, tmp_path, monkeypatch
):
    (tmp_path / "notify.py").write_text(NOTIFY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("S3CRET", "s3cret")
    with pytest.raises(InvalidConfig) as refused:
        preflight(["+trainer.callbacks.x._target_=notify.Notify", override])
    assert str(refused.value).startswith(f"{shown}: a credential in ")
    assert "s3cret" not in str(refused.value)


def test_values_that_are_no_credentials_pass_the_credential_check():
    from ms_exp.preflight.tracking import validate_no_credentials

    validate_no_credentials(
        {"x": {"pad_token": "<pad>", "token": None, "pwd": "/home/a", "url": "https://h/?a=1"}}
    )
