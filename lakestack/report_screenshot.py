"""A report page as a headless Chromium sees it: ``python -m lakestack.report_screenshot REPORT.html [OUT.png]``
(``make report-screenshot`` runs it on the newest report). For checking the page by eye, and its test.

Chromium is optional: nothing else needs it, and without it this says how to get it (exit 2).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTH, HEIGHT = 1100, 4000
_TIMEOUT_S = 120


def find_browser() -> str | None:
    """The first headless-capable Chromium on PATH, or None."""
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def screenshot(page: Path, out: Path, *, browser: str, width: int = WIDTH, height: int = HEIGHT) -> Path:
    """Render ``page`` (a local HTML file) at ``width`` x ``height`` CSS pixels into the PNG ``out``.

    Raises:
        subprocess.CalledProcessError: the browser failed (its output is in the error).
    """
    args = [
        browser,
        "--headless",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--window-size={width},{height}",
        f"--screenshot={out.resolve()}",
    ]
    # Chromium refuses to start as root with its sandbox on (as in CI containers); the page is our own file.
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--no-sandbox")
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [*args, page.resolve().as_uri()], check=True, capture_output=True, text=True, timeout=_TIMEOUT_S
    )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or len(args) > 2:
        print("usage: python -m lakestack.report_screenshot REPORT.html [OUT.png]", file=sys.stderr)
        return 2
    page = Path(args[0])
    if not page.is_file():
        print(f"error: no report page at {page}: give the path of a run's report.html.", file=sys.stderr)
        return 2
    browser = find_browser()
    if browser is None:
        print(
            f"error: no Chromium on PATH (looked for {', '.join(BROWSERS)}): install it, e.g. "
            "`apt-get install chromium`.",
            file=sys.stderr,
        )
        return 2
    out = Path(args[1]) if len(args) == 2 else page.with_name("report-screenshot.png")
    screenshot(page, out, browser=browser)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
