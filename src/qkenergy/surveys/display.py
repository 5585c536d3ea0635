"""The survey's progress display on a terminal (rich): units done, failed and to go."""

from __future__ import annotations

import time


class Display:
    """Rich progress on stderr: units and heads done, heads per second, ETA, failures."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled = enabled and total > 0
        self.heads = 0
        self.failed = 0
        self.start = time.monotonic()
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("survey"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "units · {task.fields[heads]} heads · {task.fields[rate]} heads/s · "
                "{task.fields[failed]} failed · ETA"
            ),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.task = self.bar.add_task("units", total=total, heads=0, rate="–", failed=0)
        self.bar.start()

    def advance(self, heads: int = 0, failed: bool = False) -> None:
        self.heads += heads
        self.failed += int(failed)
        if self.enabled:
            rate = self.heads / max(time.monotonic() - self.start, 1e-9)
            self.bar.update(self.task, advance=1, heads=self.heads, rate=f"{rate:.0f}", failed=self.failed)

    def close(self) -> None:
        if self.enabled:
            self.bar.stop()
