"""The documentation pages inside the package: docs/*.md is copied to qkenergy/docs/ as the package is
built, so that ``qkenergy explain`` shows them from a wheel; docs/ stays their one source.

Everything else is in pyproject.toml. An editable install or a source tree reads docs/ in place
(qkenergy.api.explain).
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PAGES = Path(__file__).resolve().parent / "docs"


class BuildWithPages(build_py):
    """build_py, then the pages of docs/ into the built package's docs/ folder."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):  # read in place from the source tree
            return
        target = Path(self.build_lib) / "qkenergy" / "docs"
        self.mkpath(str(target))
        for page in sorted(PAGES.glob("*.md")):
            self.copy_file(str(page), str(target / page.name))


setup(cmdclass={"build_py": BuildWithPages})
