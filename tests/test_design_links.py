"""Citations of docs/design.md hold: every ``docs/design.md#<anchor>`` that code, configs,
tests, tools or pages cite names a section of that page, and nothing cites the design notes
by any other name."""

import re
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
SEARCHED = (
    "ms_exp",
    "conf",
    "experiments",
    "tests",
    "benchmarks",
    "tools",
    "docs",
    ".ci",
    "examples",
    "pyproject.toml",
    "mkdocs.yml",
    "README.md",
)
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg", ".sh", ""}

HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.M)
ATTRIBUTE = re.compile(r"\{[^}]*#([\w-]+)[^}]*\}\s*$")
# "design.md#<anchor>": the repository-relative citation in code and configs, and the
# relative links of the pages (design.md#..., ../design.md#...).
CITATION = re.compile(r"design\.md#([\w-]+)")
# Built from parts so that this file does not match itself.
ELSEWHERE = re.compile(r"\.\./" + "shared" + "|" + "DESIGN" + r"\.md")


def slug(title: str) -> str:
    """Python-Markdown's default toc slug: what MkDocs gives a heading without an id."""
    text = re.sub(r"<[^>]+>|`", "", title)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(markdown: str) -> set:
    """The ids of the page's headings: an explicit ``{#id}``, else the heading's slug."""
    found = set()
    for title in HEADING.findall(re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)):
        explicit = ATTRIBUTE.search(title)
        found.add(explicit.group(1) if explicit else slug(title))
    return found


def searched_files():
    for name in SEARCHED:
        path = ROOT / name
        if path.is_file():
            yield path
        elif path.is_dir():
            for found in sorted(path.rglob("*")):
                if (
                    found.is_file()
                    and found.suffix in SUFFIXES
                    and "__pycache__" not in found.parts
                ):
                    yield found


def test_the_anchor_reader_takes_explicit_ids_and_default_slugs():
    page = (
        "# Design\n## The pipeline {#pipeline}\n### `mlflow ui` is mlflow server\n"
        "```\n# not a heading\n```\n"
    )
    assert anchors(page) == {"design", "pipeline", "mlflow-ui-is-mlflow-server"}


def test_every_cited_design_anchor_exists():
    known = anchors(DESIGN.read_text())
    missing = []
    for path in searched_files():
        text = path.read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for anchor in CITATION.findall(line):
                if anchor not in known:
                    missing.append(f"{path.relative_to(ROOT)}:{number}: design.md#{anchor}")
    assert not missing, "\n".join(missing)


def test_the_design_notes_are_cited_only_as_docs_design_md():
    offending = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:90]}"
        for path in searched_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if ELSEWHERE.search(line)
    ]
    assert not offending, "\n".join(offending)
