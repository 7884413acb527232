"""benchmarks/run_all.py puts each benchmark's results table into its docs page, refuses a
page without its marked block, and the committed pages show the committed results."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
run_all = importlib.import_module("run_all")


def test_splices_the_results_between_the_markers(tmp_path):
    results, docs = tmp_path / "results", tmp_path / "docs"
    results.mkdir()
    docs.mkdir()
    (results / "loops.md").write_text("| a |\n|---|\n| 1 |\n")
    page = docs / "loops.md"
    page.write_text(
        "# Loops\n\n<!-- results: loops -->\nold table\n<!-- /results: loops -->\n\nprose after\n"
    )
    guides = tmp_path / "guides"
    guides.mkdir()
    quoting = guides / "training-loops.md"
    quoting.write_text("# Guide\n<!-- results: loops -->\n<!-- /results: loops -->\n")
    (guides / "other.md").write_text("# Other\n")
    assert run_all.update_pages(["loops"], docs, results, guides) == {"loops": True}
    assert page.read_text() == (
        "# Loops\n\n<!-- results: loops -->\n\n| a |\n|---|\n| 1 |\n"
        "\n<!-- /results: loops -->\n\nprose after\n"
    )
    assert quoting.read_text() == (
        "# Guide\n<!-- results: loops -->\n\n| a |\n|---|\n| 1 |\n\n<!-- /results: loops -->\n"
    )
    assert (guides / "other.md").read_text() == "# Other\n"
    assert run_all.update_pages(["loops"], docs, results, guides) == {"loops": False}


def test_refuses_a_page_without_its_block(tmp_path):
    (tmp_path / "loops.md").write_text(
        "# Loops\n\n<!-- results: overhead -->\n<!-- /results: overhead -->\n"
    )
    with pytest.raises(SystemExit) as refused:
        run_all.check_page("loops", tmp_path)
    assert "has no '<!-- results: loops -->'" in str(refused.value)
    with pytest.raises(SystemExit) as refused:
        run_all.check_page("dim_reduce", tmp_path)
    assert "dim_reduce.md does not exist" in str(refused.value)


def test_every_page_shows_its_latest_results():
    """What ``run_all.py --docs-only`` would write is what the pages hold, and each page
    embeds its plot through the docs/benchmarks/results link."""
    assert (run_all.DOCS / "results").resolve() == run_all.RESULTS.resolve()
    for name in run_all.BENCHMARKS:
        text = run_all.check_page(name)
        assert run_all.splice(text, name) == text, "run python benchmarks/run_all.py --docs-only"
        for guide in run_all.quoting_guides(name):
            quoted = guide.read_text()
            assert run_all.splice(quoted, name) == quoted, f"{guide.name} quotes old results"
        assert f"](results/{name}.png)" in text
        assert (run_all.DOCS / "results" / f"{name}.png").is_file()


def test_docs_only_run_changes_nothing():
    done = subprocess.run(
        [sys.executable, "benchmarks/run_all.py", "--docs-only"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("already up to date") == len(run_all.BENCHMARKS), done.stdout
