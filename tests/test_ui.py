"""A sweep as a user sees it: the real MLflow UI (``mlflow server``) in a real browser.

A two-job ``-m`` sweep runs as a real subprocess; ``mlflow server`` serves its store; headless
Chromium, driven by Playwright, opens the experiment's runs table and each child's run page.
The browser is Debian's ``chromium`` package at an explicit path, because browser downloads
(``playwright install``) fail on these machines (docs/design.md#browser-from-apt); .ci/run
installs it. A missing browser fails this test rather than skipping it, so CI cannot go green
without it. The screenshot is kept in test-artifacts/mlflow_ui_sweep.png.
"""
from pathlib import Path

import pytest
from conftest import FAST, mlflow_server, run_cli
from playwright.sync_api import expect, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
SCREENSHOT = "mlflow_ui_sweep.png"
# The first page load compiles the UI's JavaScript bundle; slow CI machines need the margin.
UI_TIMEOUT_MS = 30_000
SERVER_START_S = 120


@pytest.fixture
def sweep(tmp_path):
    """A finished two-job sweep in sqlite:///<tmp_path>/mlflow.db: (store, experiment id,
    parent run, child runs)."""
    result = run_cli("ms_exp.run", ["-m", *FAST, "trainer.epochs=1", "optimizer.lr=0.01,0.1"],
                     tmp_path)
    assert result.rc == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    client = result.store
    experiment_id = client.get_experiment_by_name("ms_exp").experiment_id
    runs = client.search_runs([experiment_id])
    parents = [r for r in runs if r.data.tags.get("ms_exp.sweep") == "true"]
    assert len(parents) == 1, [r.info.run_name for r in runs]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(children) == 2 == len(runs) - 1, [r.info.run_name for r in runs]
    return client, experiment_id, parents[0], children


@pytest.fixture
def mlflow_ui(tmp_path, sweep):
    """``mlflow server`` on the sweep's store at a free local port; yields its base URL."""
    # One worker is plenty for one browser and starts faster than the default 4.
    with mlflow_server(tmp_path, "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
                       "--workers", "1", start_s=SERVER_START_S) as url:
        yield url


def require_chromium() -> None:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package "
                    "(apt-get install -y --no-install-recommends chromium; .ci/run does). "
                    "`playwright install` browser downloads do not work here "
                    "(docs/design.md#browser-from-apt).", pytrace=False)


@pytest.fixture
def page():
    require_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True,
            # Containers often have a small /dev/shm; Chromium crashes when it runs out.
            args=["--disable-dev-shm-usage"])
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
def test_sweep_shows_in_the_mlflow_ui_as_a_parent_run_with_two_children(request, tmp_path):
    # Checked before the fixtures start anything, so a missing browser fails the test (not a
    # fixture error) in a second rather than after the sweep.
    require_chromium()
    page = request.getfixturevalue("page")
    _, experiment_id, parent, children = request.getfixturevalue("sweep")
    mlflow_ui = request.getfixturevalue("mlflow_ui")
    expect.set_options(timeout=UI_TIMEOUT_MS)
    parent_id, parent_name = parent.info.run_id, parent.info.run_name
    try:
        # The runs table. (`#/experiments/<id>` alone opens MLflow 3's GenAI overview.)
        page.goto(f"{mlflow_ui}/#/experiments/{experiment_id}/runs")
        expect(page.get_by_text("3 matching runs")).to_be_visible()
        _close_assistant_panel(page)

        parent_link = page.get_by_role("link", name=parent_name, exact=True)
        expect(parent_link).to_be_visible()
        expect(parent_link).to_have_attribute(
            "href", f"#/experiments/{experiment_id}/runs/{parent_id}")

        # Children are nested under the parent, collapsed: its row's only button expands it.
        child_links = [page.locator(f'a[href="#/experiments/{experiment_id}/runs/'
                                    f'{child.info.run_id}"]') for child in children]
        if not child_links[0].is_visible():
            page.get_by_role("row").filter(has=parent_link).get_by_role("button").click()
        for child, link in zip(children, child_links):
            expect(link).to_be_visible()
            expect(link).to_have_text(child.info.run_name)

        # What the sweep varied and what it measured, as table columns.
        page.get_by_role("button", name="Columns").click()
        chooser = page.get_by_role("dialog")
        for column in ("optimizer.lr", "eval/accuracy"):
            chooser.get_by_placeholder("Search columns").fill(column)
            # The search highlights its match: "optimizer.lr" also in "optimizer.lr_init",
            # listed after it.
            chooser.get_by_text(column, exact=True).first.click()
        page.keyboard.press("Escape")
        expect(chooser).to_be_hidden()
        for column in ("optimizer.lr", "eval/accuracy"):
            expect(page.get_by_role("columnheader", name=column, exact=True).first) \
                .to_be_visible()
        for lr in ("0.01", "0.1"):
            expect(page.get_by_role("gridcell", name=lr, exact=True)).to_be_visible()
        _save_screenshot(page, tmp_path, SCREENSHOT)

        # Each child's own page: its learning rate, its accuracy, its parent.
        assert sorted(c.data.params["optimizer.lr"] for c in children) == ["0.01", "0.1"]
        for child in children:
            page.goto(f"{mlflow_ui}/#/experiments/{experiment_id}/runs/{child.info.run_id}")
            heading = page.get_by_role("heading", name=child.info.run_name, exact=True)
            expect(heading).to_be_visible()
            assert _table_value(page, "Search parameters", "optimizer.lr") == \
                child.data.params["optimizer.lr"]
            assert float(_table_value(page, "Search metrics", "eval/accuracy")) == pytest.approx(
                child.data.metrics["eval/accuracy"], abs=1e-3)
            expect(page.get_by_role("link", name=parent_name, exact=True)).to_have_attribute(
                "href", f"#/experiments/{experiment_id}/runs/{parent_id}")
            expect(page.get_by_text("Finished", exact=True)).to_be_visible()
    except BaseException:
        _save_screenshot(page, tmp_path, "mlflow_ui_failure.png")
        raise


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
