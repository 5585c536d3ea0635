"""docs/report.md's report demo: a small survey, its report, and a screenshot of the page.

    python docs/report_demo.py WORKDIR [--screenshot docs/report.png]

Writes into WORKDIR: a toy training run (four llama-shaped checkpoints at steps
0, 100, 1000 and 10000 whose keys drift towards their queries, see
tests/survey_data.py), a manifest with it and the embedded all-MiniLM-L6-v2,
then runs

    qkenergy survey WORKDIR/manifest.toml -o WORKDIR/survey --per-layer --samples 2000
    qkenergy report WORKDIR/survey -o WORKDIR/report.html --baseline toy-step-0

and, with --screenshot, saves the top of the page as seen in headless
Chromium (docs/report_screenshot.py).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests"), str(HERE)]

from report_screenshot import screenshot  # noqa: E402

from survey_data import TOY_MIX, TOY_STEPS, toy_checkpoint  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--screenshot", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir.resolve()
    entries = ['[[model]]\nsource = "embedded"\ngroup = "sentence encoder"\n']
    for step, mix in zip(TOY_STEPS, TOY_MIX):
        path = toy_checkpoint(work / "checkpoints" / f"step-{step}", mix)
        entries.append(
            f'[[model]]\nsource = "{path}"\nname = "toy-step-{step}"\nstep = {step}\ngroup = "toy run"\n'
        )
    manifest = work / "manifest.toml"
    manifest.write_text("\n".join(entries))
    qkenergy = [sys.executable, "-m", "qkenergy.cli"]
    survey = [
        *qkenergy,
        "survey",
        str(manifest),
        "-o",
        str(work / "survey"),
        "--per-layer",
        "--samples",
        "2000",
    ]
    report = [
        *qkenergy,
        "report",
        str(work / "survey"),
        "-o",
        str(work / "report.html"),
        "--baseline",
        "toy-step-0",
    ]
    for command in (survey, report):
        print("$", " ".join(command[2:]).replace("qkenergy.cli", "qkenergy"), flush=True)
        subprocess.run(command, check=True)
    if args.screenshot is not None:
        screenshot(work / "report.html", args.screenshot, height=1250)
        print(f"wrote {args.screenshot}")


if __name__ == "__main__":
    main()
