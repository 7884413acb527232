"""Shared helpers: run the real command lines in a scratch working directory."""
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional, Sequence

import pytest
from mlflow import MlflowClient

# Keep test jobs quiet and short unless a test says otherwise.
FAST = ("trainer.progress_bar=never",)


class CliResult:
    def __init__(self, completed: subprocess.CompletedProcess, cwd: Path):
        self.rc = completed.returncode
        self.stdout = completed.stdout
        self.stderr = completed.stderr
        self.cwd = cwd

    @property
    def store(self) -> MlflowClient:
        return MlflowClient(f"sqlite:///{self.cwd / 'mlflow.db'}")

    def field(self, prefix: str) -> str:
        """The rest of the first stdout line that starts with ``prefix``."""
        for line in self.stdout.splitlines():
            if line.startswith(prefix):
                return line[len(prefix):].strip()
        raise AssertionError(f"no line starting {prefix!r} in:\n{self.stdout[-3000:]}")

    @property
    def run_id(self) -> str:
        return self.field("MLflow run ").split()[0]

    @property
    def run_dir(self) -> Path:
        return Path(self.field("outputs:"))


def run_cli(module: str, args: Sequence[str], cwd: Path, env: Optional[Dict[str, str]] = None,
            timeout: int = 300) -> CliResult:
    Path(cwd).mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    completed = subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=full_env,
                               capture_output=True, text=True, timeout=timeout)
    return CliResult(completed, cwd)


def train(cwd: Path, *overrides: str, env=None) -> CliResult:
    result = run_cli("ms_exp.run", [*FAST, *overrides], cwd, env)
    assert result.rc == 0, f"rc={result.rc}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def free_port() -> int:
    """A port nobody listens on now, so concurrent or leftover jobs never share a master."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path
