"""The report page in a real browser: headless Chromium renders it with the verdict on top (skipped without
Chromium, so a fresh machine's `make test` does not need it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_samples import sample_report, sample_timeline

from lakestack.report_screenshot import BROWSERS, find_browser, main, screenshot

BROWSER = find_browser()


def _report_page(directory: Path) -> Path:
    report = sample_report(sample_timeline(), micro_batches=10, pipelines={"ingest": {"ok": True, "rows": 2}})
    report.write(directory, settings={"command": "lakestack demo"})
    return directory / "report.html"


@pytest.mark.slow
@pytest.mark.skipif(BROWSER is None, reason=f"no Chromium on PATH (looked for {', '.join(BROWSERS)})")
def test_chromium_renders_the_page_with_the_pass_banner_on_top(tmp_path: Path):
    from matplotlib.image import imread

    assert BROWSER is not None
    out = screenshot(_report_page(tmp_path), tmp_path / "shot.png", browser=BROWSER, width=1000, height=1600)

    pixels = (imread(out)[:, :, :3] * 255).round().astype(int)
    assert pixels.shape[:2] == (1600, 1000)
    # The PASS banner's background (#e6f4ea) fills a band in the first 150 px, and nowhere below 300 px.
    banner = (pixels == (0xE6, 0xF4, 0xEA)).all(axis=2)
    assert banner[:150].sum() > 10_000
    assert banner[300:].sum() == 0


def test_without_a_page_or_a_browser_the_command_says_what_to_do(tmp_path: Path, monkeypatch, capsys):
    assert main([str(tmp_path / "nope.html")]) == 2
    assert capsys.readouterr().err == (
        f"error: no report page at {tmp_path / 'nope.html'}: give the path of a run's report.html.\n"
    )
    (tmp_path / "report.html").write_text("<html></html>")
    monkeypatch.setattr("lakestack.report_screenshot.shutil.which", lambda name: None)
    assert main([str(tmp_path / "report.html")]) == 2
    assert capsys.readouterr().err == (
        "error: no Chromium on PATH (looked for chromium, chromium-browser, google-chrome, google-chrome-stable): "
        "install it, e.g. `apt-get install chromium`.\n"
    )
