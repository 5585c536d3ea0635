"""Screenshot of a qkenergy report page in headless Chromium (the image in docs/report.md).

    python docs/report_screenshot.py REPORT.html OUT.png [--height 1500]

Opens the page as a browser would (file://, nothing fetched from the network),
waits until every plotly figure is drawn, and saves the top of the page
(1440 px wide, --height px tall). Needs playwright and Chromium
(/usr/bin/chromium, or set QKENERGY_CHROMIUM).
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from playwright.sync_api import sync_playwright


def screenshot(page_path: Path, out: Path, *, width: int = 1440, height: int = 1500) -> None:
    chromium = os.environ.get("QKENERGY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(page_path.resolve().as_uri(), wait_until="load")
            page.wait_for_function(
                "() => [...document.querySelectorAll('.js-plotly-plot')].every(d => d._fullLayout)"
            )
            page.screenshot(path=str(out), clip={"x": 0, "y": 0, "width": width, "height": height})
        finally:
            browser.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--height", type=int, default=1500)
    args = parser.parse_args()
    screenshot(args.report, args.out, height=args.height)
    print(f"wrote {args.out}")
