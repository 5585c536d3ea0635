"""The report in a real headless Chromium, and its PNG / SVG figures (rendered by kaleido in Chromium).

Needs the distribution's Chromium (Debian: apt-get install chromium; .ci/run
installs it) and playwright, which drives it. Without them the tests skip on a
developer machine and FAIL in CI (CI=true), so a CI that lost its browser
cannot pass silently.
"""

from __future__ import annotations

import io
import os
import shutil
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from qkenergy.report.page import build_report

CHROMIUM = os.environ.get("QKENERGY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# A blank or single-colour image has a pixel standard deviation of 0; a rendered plot is far above this.
MIN_PIXEL_SD = 5.0


def _require_browser() -> None:
    missing = []
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        missing.append(f"Chromium ({CHROMIUM})")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install -e '.[test]')")
    if not missing:
        return
    message = f"browser test needs {' and '.join(missing)}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message}; CI must install it (see .ci/run)")
    pytest.skip(message)


def _pixel_sd(png: bytes) -> float:
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return float(np.asarray(image.convert("L"), dtype=np.float64).std())


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, survey_frames):
    _require_browser()
    heads, layers, models = survey_frames
    out = tmp_path_factory.mktemp("report") / "report.html"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BROWSER_PATH", CHROMIUM)  # kaleido's browser: the same Chromium
        return build_report(
            heads, layers, out, baseline="toy-llama@0", models=models, settings={"samples": 300}
        )


def test_static_figures(report) -> None:
    assert report.renderer == "kaleido"  # with a browser, plotly's own renderer draws them
    for name in report.figures:
        png = (report.directory / f"{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG"), name
        assert _pixel_sd(png) > MIN_PIXEL_SD, f"{name}.png is blank"
        svg = ET.parse(report.directory / f"{name}.svg").getroot()
        assert svg.tag.endswith("svg") and len(list(svg.iter())) > 50, f"{name}.svg is empty"


def test_page_renders_offline_in_chromium(report) -> None:
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    outside: list[str] = []
    started = time.perf_counter()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on(
                "console",
                lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
            )
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))

            def route(r) -> None:
                # The page must need nothing but itself: every other request is recorded and refused.
                if r.request.url.startswith(("file:", "data:", "blob:")):
                    r.continue_()
                else:
                    outside.append(r.request.url)
                    r.abort()

            page.route("**/*", route)
            page.goto(report.html.resolve().as_uri(), wait_until="load")
            page.wait_for_function(
                "n => [...document.querySelectorAll('.js-plotly-plot')].filter(d => d._fullLayout).length === n",
                arg=len(report.figures),
                timeout=20_000,
            )
            for name in report.figures:
                div = page.locator(f"#figure-{name}")
                # Drawn, not just created: an SVG with traces, and a screenshot that is not one colour.
                drawn = div.evaluate(
                    "d => d.querySelectorAll('svg.main-svg g.trace, svg.main-svg g.hm, svg.main-svg image').length"
                )
                assert drawn > 0, f"{name}: no trace drawn"
                assert _pixel_sd(div.screenshot()) > MIN_PIXEL_SD, f"{name}: blank figure"
            # Hovering a head (a real mouse move onto one of the toy models' points) shows its model,
            # layer, head and statistics.
            figure = "#figure-symmetric_energy_by_model"
            page.locator(figure).scroll_into_view_if_needed()
            point = page.locator(f"{figure} g.points path.point").nth(80).bounding_box()
            page.mouse.move(point["x"] + point["width"] / 2, point["y"] + point["height"] / 2)
            page.wait_for_selector(f"{figure} .hoverlayer .hovertext", timeout=5_000)
            label = page.locator(f"{figure} .hoverlayer").text_content()
            assert "toy-llama@" in label and "layer" in label and "head" in label and "s = " in label, label
            assert _pixel_sd(page.screenshot(full_page=True)) > MIN_PIXEL_SD
        finally:
            browser.close()
    elapsed = time.perf_counter() - started
    assert not errors, errors
    assert not outside, f"the page fetched from outside itself: {outside}"
    print(f"page checked in {elapsed:.1f} s")
