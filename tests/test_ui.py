"""A sweep as a user sees it: the real MLflow UI (``mlflow server``) in a real browser.

A two-job ``-m`` sweep runs as a real subprocess; ``mlflow server`` serves its store; headless
Chromium, driven by Playwright, opens the addresses the sweep printed: its jobs' runs table
and their compare page, then a job's own page.
The browser is Debian's ``chromium`` package at an explicit path, because browser downloads
(``playwright install``) fail on these machines (docs/design.md#browser-from-apt); .ci/run
installs it. A missing browser fails this test rather than skipping it, so CI cannot go green
without it. The screenshot is kept in test-artifacts/mlflow_ui_sweep.png.
"""

import re
import shutil
from pathlib import Path

import pytest
from conftest import FAST, migrated_store, mlflow_server, run_cli
from playwright.sync_api import expect, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
SCREENSHOT = "mlflow_ui_sweep.png"
# The first page load compiles the UI's JavaScript bundle; slow CI machines need the margin.
UI_TIMEOUT_MS = 30_000
SERVER_START_S = 120


@pytest.fixture
def sweep(tmp_path):
    """A finished two-job sweep in sqlite:///<tmp_path>/mlflow.db: (what it printed,
    experiment id, parent run, child runs). The store starts as a copy of conftest's migrated
    empty one: its first use is not what this test shows."""
    shutil.copyfile(migrated_store(), tmp_path / "mlflow.db")
    result = run_cli(
        "ms_exp.run", ["-m", *FAST, "trainer.epochs=1", "optimizer.lr=0.01,0.1"], tmp_path
    )
    assert result.rc == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    client = result.store
    experiment_id = client.get_experiment_by_name("ms_exp").experiment_id
    runs = client.search_runs([experiment_id])
    parents = [r for r in runs if r.data.tags.get("ms_exp.sweep") == "true"]
    assert len(parents) == 1, [r.info.run_name for r in runs]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(children) == 2 == len(runs) - 1, [r.info.run_name for r in runs]
    return result.stdout, experiment_id, parents[0], children


@pytest.fixture
def mlflow_ui(tmp_path, sweep):
    """``mlflow server`` on the sweep's store at a free local port; yields its base URL."""
    # One worker is plenty for one browser and starts faster than the default 4.
    with mlflow_server(
        tmp_path,
        "--backend-store-uri",
        f"sqlite:///{tmp_path / 'mlflow.db'}",
        "--workers",
        "1",
        start_s=SERVER_START_S,
    ) as url:
        yield url


def require_chromium() -> None:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium package "
            "(apt-get install -y --no-install-recommends chromium; .ci/run does). "
            "`playwright install` browser downloads do not work here "
            "(docs/design.md#browser-from-apt).",
            pytrace=False,
        )


@pytest.fixture
def page():
    require_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            headless=True,
            # Containers often have a small /dev/shm; Chromium crashes when it runs out.
            args=["--disable-dev-shm-usage"],
        )
        try:
            page = browser.new_page(viewport={"width": 1920, "height": 1000})
            page.set_default_timeout(UI_TIMEOUT_MS)
            yield page
        finally:
            browser.close()


def _save_screenshot(page, tmp_path: Path, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(tmp_path / name))
    page.screenshot(path=str(ARTIFACTS / name))


@pytest.mark.browser
@pytest.mark.e2e
def test_a_sweeps_printed_addresses_open_its_jobs_compared_in_the_mlflow_ui(request, tmp_path):
    # Checked before the fixtures start anything, so a missing browser fails the test (not a
    # fixture error) in a second rather than after the sweep.
    require_chromium()
    page = request.getfixturevalue("page")
    printed, experiment_id, parent, children = request.getfixturevalue("sweep")
    mlflow_ui = request.getfixturevalue("mlflow_ui")
    expect.set_options(timeout=UI_TIMEOUT_MS)
    parent_id, parent_name = parent.info.run_id, parent.info.run_name
    lrs = sorted(c.data.params["optimizer.lr"] for c in children)
    assert lrs == ["0.01", "0.1"]
    try:
        # The runs table the sweep printed: its jobs alone, the swept key and the objective
        # as columns without choosing them, in MLflow's training view (not the GenAI one).
        page.goto(_address(printed, "its jobs in a table", mlflow_ui))
        _close_assistant_panel(page)
        expect(page.get_by_text("Model training", exact=True)).to_be_visible()
        for column in ("optimizer.lr", "eval/accuracy"):
            expect(page.get_by_role("columnheader", name=column, exact=True).first).to_be_visible()
        for child in children:
            link = page.locator(
                f'a[href^="#/experiments/{experiment_id}/runs/{child.info.run_id}"]'
            )
            expect(link).to_have_text(child.info.run_name)
        for lr in lrs:
            expect(page.get_by_role("gridcell", name=lr, exact=True)).to_be_visible()
        expect(page.get_by_role("link", name=parent_name, exact=True)).to_have_count(0)

        # The compare page the sweep printed: both jobs side by side, what each was given
        # and what each measured.
        page.goto(_address(printed, "compare its jobs", mlflow_ui))
        expect(page.get_by_text("Comparing 2 Runs from 1 Experiment")).to_be_visible()
        _close_assistant_panel(page)
        for child in children:
            expect(page.get_by_text(child.info.run_name, exact=True).first).to_be_visible()
        ordered = _page_order(page, children)
        expect(_compare_row(page, "optimizer.lr").get_by_role("cell")).to_have_text(
            [c.data.params["optimizer.lr"] for c in ordered]
        )
        expect(page.get_by_title("Plot chart").filter(has_text="eval/accuracy")).to_be_visible()
        shown = [float(v) for v in page.evaluate(METRIC_VALUES, "eval/accuracy")]
        assert shown == pytest.approx([c.data.metrics["eval/accuracy"] for c in ordered], abs=1e-3)
        # The swept key against the metric, drawn (MLflow's plots are Plotly's).
        expect(page.locator(".js-plotly-plot").first).to_be_visible()
        _save_screenshot(page, tmp_path, SCREENSHOT)

        # A job's own page, from the address printed for a run: its value, its parent.
        child = children[0]
        page.goto(
            f"{mlflow_ui}/#/experiments/{experiment_id}/runs/{child.info.run_id}"
            "?workflowType=machine_learning"
        )
        expect(page.get_by_role("heading", name=child.info.run_name, exact=True)).to_be_visible()
        assert (
            _table_value(page, "Search parameters", "optimizer.lr")
            == child.data.params["optimizer.lr"]
        )
        expect(page.get_by_role("link", name=parent_name, exact=True)).to_have_attribute(
            "href", re.compile(f"^#/experiments/{experiment_id}/runs/{parent_id}")
        )
        expect(page.get_by_text("Finished", exact=True)).to_be_visible()
    except BaseException:
        _save_screenshot(page, tmp_path, "mlflow_ui_failure.png")
        raise


def _address(printed: str, label: str, mlflow_ui: str) -> str:
    """The address the sweep printed after ``label``, on the test's server: ms_exp prints
    the one of the ``mlflow ui`` command it prints, on port 5000."""
    found = re.search(
        rf"^  {re.escape(label)}[^:]*: (http://127\.0\.0\.1:5000)(/\S+)$", printed, re.M
    )
    assert found, printed[-3000:]
    return mlflow_ui + found.group(2)


def _compare_row(page, name: str):
    """The compare page's table row of a param, found by its heading cell."""
    return (
        page.get_by_role("row")
        .filter(has=page.get_by_role("rowheader", name=name, exact=True))
        .first
    )


# The compare page's metrics are two virtualised grids, names and values, whose cells of one
# metric sit at the same height: the values of the metric named, one per run.
METRIC_VALUES = """(name) => {
  const link = [...document.querySelectorAll('a[title="Plot chart"]')]
      .find(e => e.textContent.trim() === name);
  const cell = link.parentElement;
  const grids = [...document.querySelectorAll('[role=grid]')];
  const values = grids[grids.indexOf(cell.closest('[role=grid]')) + 1];
  return [...values.querySelectorAll('[role=rowgroup] > div')]
      .filter(d => d.style.top === cell.style.top).map(d => d.textContent.trim());
}"""


def _page_order(page, children):
    """``children`` in the compare page's column order (its Run ID row)."""
    ids = _compare_row(page, "Run ID:").inner_text().split()
    return sorted(children, key=lambda c: ids.index(c.info.run_id))


def _close_assistant_panel(page) -> None:
    """MLflow 3.17 opens its "MLflow Assistant" side panel on a browser's first visit; it
    narrows the runs table, so close it when it is there."""
    close = page.get_by_role("button", name="Close", exact=True)
    if close.count() == 1 and close.is_visible():
        close.click()


def _table_value(page, search: str, name: str) -> str:
    """The value next to ``name`` in a run page's Parameters or Metrics table, found the way
    a user would: typed into the table's search box (the tables scroll inside the page)."""
    page.get_by_placeholder(search).fill(name)
    row = page.get_by_role("row").filter(has=page.get_by_role("cell", name=name, exact=True))
    expect(row).to_be_visible()
    return row.get_by_role("cell").nth(1).inner_text().strip()
