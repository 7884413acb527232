"""docs/reference/config.md is what tools/config_reference.py writes from the schemas and
conf/, and it tells a user what they look up: every key's type, default, choices and meaning,
every option of every group."""

import dataclasses
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from ms_exp.config.schema import GROUP_SCHEMAS

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "config_reference.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("config_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reference = _load_script()


@pytest.fixture(scope="module")
def page() -> str:
    return reference.render()


def rows(page: str, heading: str) -> Dict[str, List[str]]:
    """key -> its row's cells (key, type, default, allowed, meaning) in the table under
    ``heading``."""
    lines = page.splitlines()
    assert heading in lines, f"no heading {heading!r}"
    found = {}
    for line in lines[lines.index(heading) + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            found[cells[0].strip("`")] = cells
    return found


def test_the_committed_page_is_what_the_script_writes(page):
    committed = reference.PAGE.read_text() if reference.PAGE.is_file() else ""
    assert committed == page, (
        f"{reference.PAGE.relative_to(ROOT)} is stale: run {reference.COMMAND}"
    )


def test_every_key_has_a_meaning():
    missing = reference.missing_meanings()
    assert not missing, "\n".join(missing)


def test_integrated_save_is_a_bool_with_each_options_default(page):
    for option, default in (("integrated", "true"), ("sliced", "false"), ("none", "true")):
        row = rows(page, f"#### `checkpoint={option}`")["checkpoint.integrated_save"]
        assert row[1:3] == ["bool", f"`{default}`"], option
        assert "merged weights" in row[4]


def test_ranges_and_choices_a_type_cannot_express_are_shown(page):
    rho = rows(page, "#### `boost=dim_reduce`")["boost.rho"]
    assert rho[1:3] == ["float", "`0.55`"] and "(0, 1)" in rho[4] and "line search" in rho[4]
    mode = rows(page, "### trainer")["trainer.mode"]
    assert mode[1:3] == ["enum", "`graph`"]
    assert [choice.split(":")[0] for choice in mode[3].split("<br>")] == ["`graph`", "`pynative`"]
    target = rows(page, "### trainer")["trainer.device_target"]
    assert target[3] == "`None`, `CPU`, `GPU`, `Ascend`"
    assert rows(page, "#### `model=resnet`")["model.depth"][3] == "`18`, `50`"


def test_every_option_of_every_group_has_a_table_of_its_keys(page):
    for group, options in GROUP_SCHEMAS.items():
        for option, schema in options.items():
            keys = rows(page, f"#### `{group}={option}`")
            declared = {f"{group}.{f.name}" for f in dataclasses.fields(schema)}
            assert declared <= set(keys), (group, option, declared - set(keys))
            assert all(row[4] for row in keys.values()), (group, option)
    datasets = rows(page, "#### `dataset=mnist`")
    assert datasets["dataset.path"][2] == "`${oc.env:DATA_PATH,null}`"
    for preset in ("concurrent", "slurm"):
        assert f"### hydra/launcher={preset}" in page


def test_sections_that_take_a_targets_arguments_say_so(page):
    for section in ("optimizer", "loss"):
        assert f"with `{section}._target_` set, a key this table does not list is passed" in page
    assert "loss.parts.<name>.weight" in rows(page, "#### `loss.parts.<name>`")


def test_check_names_the_command_when_the_page_is_stale(page, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(reference, "render", lambda: page)
    stale = tmp_path / "config.md"
    row = "| `trainer.epochs` | int | `10` |"
    stale.write_text(page.replace(row, row.replace("`10`", "`3`"), 1))
    assert reference.main(["--check"], page=stale) == 1
    message = capsys.readouterr().err
    assert message.count("\n") == 1 and f"run {reference.COMMAND}" in message
    assert reference.main(["--check"], page=tmp_path / "missing.md") == 1
    capsys.readouterr()
    stale.write_text(page)
    assert reference.main(["--check"], page=stale) == 0
    assert reference.main([], page=tmp_path / "new" / "config.md") == 0
    assert (tmp_path / "new" / "config.md").read_text() == page


def test_the_script_runs_from_the_checkout_without_mindspore():
    code = (
        "import runpy, sys; sys.argv = ['tools/config_reference.py', '--check']\n"
        "try:\n    runpy.run_path('tools/config_reference.py', run_name='__main__')\n"
        "except SystemExit as end:\n    code = end.code\n"
        "assert 'mindspore' not in sys.modules, 'imported MindSpore'\n"
        "sys.exit(code)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
