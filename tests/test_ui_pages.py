"""What a person sees in a browser after a round the CLI ran: the Dagster asset page of
``candidate_evaluation`` and MLflow's compare view, in headless Chromium driven by Playwright.

A structure round (test_cli_dagster_events's scripted rules: the candidate wins) reports to a
scratch Dagster instance and MLflow store; ``dagster-webserver`` and ``mlflow ui`` are started
on them, each in its own session and stopped by its process group. The pages must show the
behaviour plot as an image and the decision. With ``AUTOMEM_SCREENSHOTS=<dir>`` the screenshots
are saved there (docs/dagster.md's and docs/mlflow.md's are made so: docs/images/). Skipped,
saying why, where Chromium (Debian package ``chromium``) or the ``playwright`` package is not
installed; under CI (``AUTOMEM_CI=1``, ``.ci/run``) that skip is a failure.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_cli_dagster_events import SETTINGS, endpoints_file
from test_dagster_defs import GAME_RULES, meta_rules, winning_patch
from test_dagster_dev import _get, _stop

from automem_dagster.commands import shared
from automem_dagster.commands.structure import structure_round
from automem_dagster.llm.process import free_port
from automem_dagster.tracking import Tracker

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BIN = Path(sys.executable).parent
pytestmark = [
    pytest.mark.integration,
    pytest.mark.ci_required,
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on PATH: `apt-get install chromium` for the browser check"),
]


def serve(command: list[str], url: str, log: Path, env: dict) -> subprocess.Popen:
    """Start a web UI in its own session and wait until ``url`` answers (the caller stops it)."""
    process = subprocess.Popen(command, env={**os.environ, **env}, stdout=log.open("w"), stderr=subprocess.STDOUT,
                               start_new_session=True)
    deadline = time.monotonic() + 180
    while not _get(url):
        if process.poll() is not None or time.monotonic() > deadline:
            _stop(process)
            pytest.fail(f"{command[0]} did not answer {url}: {log.read_text()[-3000:]}")
        time.sleep(1)
    return process


def shoot(page, name: str) -> None:
    folder = os.environ.get("AUTOMEM_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / name), full_page=False)


def test_the_dagster_and_mlflow_pages_show_the_plot_and_the_decision(tmp_path, monkeypatch, storage, scripted):
    playwright = pytest.importorskip("playwright.sync_api", reason="`pip install playwright` for the browser check")
    server = scripted(meta_rules(storage, [winning_patch()]) + GAME_RULES)
    monkeypatch.setattr(shared, "STORAGE", storage.storage())
    store = f"sqlite:///{tmp_path}/mlflow.db"
    structure_round(SETTINGS, endpoints_file(tmp_path, server), tracker=Tracker(store, artifact_root=tmp_path / "art"))

    dagster_port, mlflow_port = free_port(), free_port()
    dagster_url, mlflow_url = f"http://127.0.0.1:{dagster_port}", f"http://127.0.0.1:{mlflow_port}"
    processes = [
        serve([str(BIN / "dagster-webserver"), "-m", "automem_dagster.defs", "-h", "127.0.0.1", "-p", str(dagster_port)],
              f"{dagster_url}/server_info", tmp_path / "dagster.log", {"DAGSTER_HOME": os.environ["DAGSTER_HOME"]}),
        serve([str(BIN / "mlflow"), "ui", "--backend-store-uri", store, "--host", "127.0.0.1", "--port",
               str(mlflow_port), "--workers", "1"], f"{mlflow_url}/health", tmp_path / "mlflow.log", {}),
    ]
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            check_dagster(page, dagster_url)
            check_mlflow(page, mlflow_url, Tracker(store, artifact_root=tmp_path / "art"))
            browser.close()
    finally:
        for process in processes:
            _stop(process)


def check_dagster(page, url: str) -> None:
    """The asset page: the latest materialization's metadata (Dagster 1.13 renders short markdown,
    the tables, inline; a plot is one click away as an image), and the evaluation_gate check
    saying what the gate would do."""
    page.goto(f"{url}/assets/candidate_evaluation", timeout=120_000)
    skip = page.get_by_role("button", name="Skip")       # Dagster's first-visit community dialog
    skip.wait_for(timeout=30_000)
    skip.click()
    row = page.locator("tr", has_text="behaviour_plot").first
    row.wait_for(timeout=120_000)
    row.scroll_into_view_if_needed()
    shoot(page, "dagster_candidate_evaluation.png")
    row.get_by_text("Show Markdown").click()          # a plot is too long to show in the table: one click
    image = page.locator('img[src^="data:image/png;base64,"]').first
    image.wait_for(timeout=30_000)
    assert image.bounding_box()["width"] > 200
    page.wait_for_timeout(1000)                       # the dialog fades in: shoot it opaque
    shoot(page, "dagster_behaviour_plot.png")
    page.keyboard.press("Escape")
    check_long_values(page, url)
    page.goto(f"{url}/assets/candidate_evaluation?view=checks", timeout=60_000)
    page.get_by_text("evaluation_gate").first.wait_for(timeout=60_000)
    page.get_by_text("evaluation_gate").first.click()
    page.get_by_text("keep", exact=True).first.wait_for(timeout=60_000)
    shoot(page, "dagster_evaluation_gate.png")


FITS = """row => {
    let box = row.parentElement;
    while (box && getComputedStyle(box).overflowX === 'visible') box = box.parentElement;
    return row.getBoundingClientRect().right <= box.getBoundingClientRect().right + 1;
}"""
"""Whether a metadata row ends inside the box that clips it (nothing cut off at the right edge)."""


def check_long_values(page, url: str) -> None:
    """``champion_scaffold``'s page: its MLflow links read as short labels, and no row of its
    metadata runs past the page (a long URL or code line, which do not wrap, once pushed every
    value off its edge)."""
    page.goto(f"{url}/assets/champion_scaffold", timeout=60_000)
    run_link = page.get_by_role("link", name="MLflow candidate run", exact=False).first
    run_link.wait_for(timeout=120_000)
    assert "/runs/" in run_link.get_attribute("href")
    assert page.locator("tr", has_text="mlflow_champion_run").count() >= 1
    shoot(page, "dagster_champion_scaffold.png")
    assert_nothing_cut_off(page)


def assert_nothing_cut_off(page) -> None:
    for row in page.locator("tr").all():
        assert row.evaluate(FITS), f"this metadata row runs past the page: {row.inner_text()[:300]}"


def check_mlflow(page, url: str, tracker: Tracker) -> None:
    """The compare view of the round's candidate and champion runs: the decision tag; and the
    candidate run's plot artifact shown as an image."""
    runs = {r["role"]: r for r in tracker.runs_for("crafter")}
    ids = [runs["candidate"]["run_id"], runs["champion"]["run_id"]]
    experiment = tracker.experiment_id("crafter")
    page.goto(f'{url}/#/compare-runs?runs=["{ids[0]}","{ids[1]}"]&experiments=["{experiment}"]', timeout=60_000)
    decision = page.get_by_text("automem.decision").first
    decision.wait_for(timeout=60_000)
    assert page.get_by_text("kept", exact=True).count() >= 1
    decision.scroll_into_view_if_needed()
    shoot(page, "mlflow_compare.png")
    page.goto(f"{url}/#/experiments/{experiment}/runs/{ids[0]}/artifacts/plots/progression_by_version.png",
              timeout=60_000)
    image = page.locator("img[src*='get-artifact'], img[src^='blob:'], img[src*='progression_by_version']").first
    image.wait_for(timeout=60_000)
    shoot(page, "mlflow_progression_plot.png")
