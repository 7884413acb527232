"""Docs that cannot rot: every ``python -m ms_exp.run`` command shown in README.md and docs/
composes with Hydra as shown, README's links lead to files that exist, and nothing in the
repository sends a reader outside it. (``mkdocs build --strict`` in .ci/run checks the site's
own links and anchors.)"""

import re
import shlex
import subprocess
from pathlib import Path
from typing import List, NamedTuple

import pytest

from ms_exp.preflight.compose import ConfigSource, compose_config, expand_jobs

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# A project's own config folder, as the guides use it: the worked example's.
PROJECT = ROOT / "examples" / "my_project"

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`(python -m ms_exp\.run\b[^`]*)`")
# A command starts its line (after environment assignments) or follows `&&` or `;`: a
# mention inside prose or a tree, "(python -m ms_exp.run)", is not one.
COMMAND = re.compile(
    r"(?:^\s*|&&\s*|;\s*)(?:[A-Z_]+=\S+\s+)*"
    r"(?:\S*/)?python3? -m ms_exp\.run\b(.*)"
)
PLACEHOLDER = re.compile(r"<[^<>]+>")


class Shown(NamedTuple):
    where: str
    text: str


def shown_commands() -> List[Shown]:
    """Every ms_exp.run command line in a code block or an inline code span."""
    found = []
    for page in PAGES:
        text = page.read_text()
        name = page.relative_to(ROOT)
        for block in FENCE.finditer(text):
            first = text.count("\n", 0, block.start()) + 2
            joined = block.group(1).replace("\\\n", " \n")
            for offset, line in enumerate(joined.split("\n")):
                if COMMAND.search(line):
                    continuation = line
                    # a `\`-continued command: its lines were joined with " \n" above
                    following = joined.split("\n")[offset + 1 :]
                    while continuation.endswith(" ") and following:
                        continuation += following.pop(0)
                    found.append(Shown(f"{name}:{first + offset}", continuation))
        for span in INLINE.finditer(FENCE.sub("", text)):
            found.append(Shown(f"{name} `{span.group(1)[:40]}`", span.group(1)))
    return found


def job_overrides(command: str):
    """(overrides, multirun, config source) of a shown command, placeholders filled."""
    arguments = shlex.split(
        PLACEHOLDER.sub("placeholder", COMMAND.search(command).group(1)), comments=True
    )
    overrides, multirun, config_dir = [], False, None
    while arguments:
        argument = arguments.pop(0)
        if argument in ("-m", "--multirun"):
            multirun = True
        elif argument == "--config-dir":
            config_dir = arguments.pop(0)
        elif argument in ("--from-run", "--cfg", "-c", "--package", "-p"):
            arguments.pop(0)
        elif argument in ("--help", "-h", "--hydra-help", "--info"):
            pass
        elif argument.startswith("-"):
            raise AssertionError(f"a flag the docs test does not know: {argument}")
        elif argument in ("|", "&&", "&", ">", "2>&1", ";"):
            break
        else:
            overrides.append(argument)
    source = None
    if config_dir is not None:
        folder = config_dir if Path(config_dir).is_absolute() else PROJECT / config_dir
        source = ConfigSource(config_dir=str(folder))
    return overrides, multirun, source


COMMANDS = shown_commands()


def test_the_docs_show_the_headline_commands():
    texts = [shown.text for shown in COMMANDS]
    assert any("parallel=semi_auto checkpoint=sliced" in text for text in texts)
    assert any("-m" in text.split() and "boost.rho=" in text for text in texts)
    assert len(COMMANDS) > 40


def covering_jobs(jobs: List[List[str]]) -> List[List[str]]:
    """Enough of a sweep's jobs that every swept value is composed at least once (a value
    that composes with one combination composes with all: the keys are independent)."""
    seen, chosen = set(), []
    for job in jobs:
        if not seen.issuperset(job):
            chosen.append(job)
            seen.update(job)
    return chosen


COMPOSED = set()  # the same job shown on several pages is composed once


@pytest.mark.parametrize("shown", COMMANDS, ids=[shown.where for shown in COMMANDS])
def test_every_shown_run_command_composes(shown):
    """Composed as Hydra composes it (the groups, keys and types of every value a sweep
    takes); paths and run ids a reader fills in are not looked up."""
    overrides, multirun, source = job_overrides(shown.text)
    for job in covering_jobs(expand_jobs(overrides, multirun)):
        if (tuple(job), source) not in COMPOSED:
            compose_config(job, source=source)
            COMPOSED.add((tuple(job), source))


def test_readme_links_lead_to_files_in_the_repository():
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [target for target in targets if "://" not in target]
    assert local, "README links into docs/"
    missing = [target for target in local if not (ROOT / target).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_readme_stays_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 260


def tracked_text_files() -> List[Path]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    suffixes = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg", ".sh", ""}
    return [
        ROOT / name for name in listed if Path(name).suffix in suffixes and (ROOT / name).is_file()
    ]


# Built from parts so that this file does not match itself.
OUTSIDE = re.compile(r"\.\./" + "shared|" + "DESIGN" + r"\.md")
ISSUE_NUMBER = re.compile(r"(?<![/\w])([Ii]ssues?|[Dd]ecision) #?\d+")


def test_nothing_refers_outside_the_repository_or_to_issue_numbers():
    """A reader of a clone can follow every reference: no file outside the repository, no
    tracker's issue number (an upstream issue is cited by its URL)."""
    offending = []
    for path in tracked_text_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line) or ISSUE_NUMBER.search(line):
                offending.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:90]}")
    assert not offending, "\n".join(offending)


TUTORIAL_URL = re.compile(r"https://(gitee\.com/mindspore|www\.mindspore\.cn)/\S+")


def test_each_preset_that_reproduces_a_tutorial_cites_it_by_url():
    presets = sorted((ROOT / "experiments").glob("*.yaml"))
    citing = []
    for preset in presets:
        header = "\n".join(line for line in preset.read_text().splitlines() if line.startswith("#"))
        if "tutorial" in header.lower():
            assert TUTORIAL_URL.search(header), f"{preset.name} names a tutorial without its URL"
            citing.append(preset.name)
    assert "model_saving.yaml" in citing and "dim_reduce_stage_one.yaml" in citing


TUTORIAL_NAME = re.compile(r"\b([\w&-]+) tutorial\b", re.I)


def test_the_code_names_only_the_tutorials_the_design_page_lists():
    """A comment's "the model-saving tutorial" is looked up in docs/design.md#tutorials."""
    design = (ROOT / "docs" / "design.md").read_text()
    listed = set(re.findall(r"^\| the ([\w&-]+) tutorial \|", design, re.M))
    assert listed == {"model-saving", "training-flow", "dimension-reduction", "hybrid-training"}
    unknown = []
    for path in tracked_text_files():
        if path.suffix not in (".py", ".yaml"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for name in TUTORIAL_NAME.findall(line):
                if "-" in name and name.lower() not in listed:
                    unknown.append(f"{path.relative_to(ROOT)}:{number}: {name} tutorial")
    assert not unknown, "\n".join(unknown)


# `$ ls [-A] outputs/<date>/<time>[/sub]` in a guide's text block, and the names it lists on
# the lines below (until the next prompt or the block's end).
LISTING = re.compile(
    r"^\$ ls (?:-A )?outputs/[^/\s]+/[^/\s]+(?:/(\S+))?\n((?:(?!\$ )[^`\n].*\n)+)", re.M
)
# One file of many: the epoch and step of a checkpoint differ with the run's length.
NUMBERED = re.compile(r"checkpoint-\d+_\d+")


def shown_listings(page: str) -> dict:
    """Each run-folder listing ``docs/guides/<page>`` shows: {sub-folder ('' for the run
    folder): the names it lists}; "..." stands for names left out."""
    text = (ROOT / "docs" / "guides" / page).read_text()
    return {(match.group(1) or ""): match.group(2).split() for match in LISTING.finditer(text)}


def assert_listed_as_shown(run_dir: Path, page: str, subfolders) -> None:
    """The run folder holds what the guide shows of it: the same names (checkpoints of
    any epoch and step alike), or at least those shown where it elides some with "..."."""
    shown = shown_listings(page)
    assert set(subfolders) <= set(shown), sorted(shown)
    for sub in subfolders:
        names = {NUMBERED.sub("checkpoint-E_S", n) for n in shown[sub] if n != "..."}
        here = {NUMBERED.sub("checkpoint-E_S", p.name) for p in (run_dir / sub).iterdir()}
        if "..." in shown[sub]:
            assert names <= here, (page, sub, sorted(names - here))
        else:
            assert names == here, (page, sub, sorted(names ^ here))
