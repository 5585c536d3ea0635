"""Argument types and option helpers shared by the commands: index selections, head, offsets, memory checks."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from qkenergy.analysis.nullspec import null_kinds
from qkenergy.base.cache_dirs import default_cache_dir
from qkenergy.base.errors import QKEnergyError, check_memory
from qkenergy.cli.output import one_line
from qkenergy.math.defaults import EDGE_CUT, IMBALANCE_CUT, RADIUS, SAMPLES

if TYPE_CHECKING:  # pragma: no cover
    from qkenergy.analysis.nullspec import NullSpec

DEFAULT_BASELINE_SAMPLES = SAMPLES  # as nulls.null_law and analyze: shares their cache


class IntListType(click.ParamType):
    """Comma-separated positive integers, e.g. ``10,100,1000,1e5``."""

    name = "integers"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[int, ...]:
        if isinstance(value, tuple):
            return value
        items = [part.strip() for part in str(value).split(",") if part.strip()]
        if not items:
            self.fail("expected comma-separated positive integers, e.g. 10,100,1000", param, ctx)
        out = []
        for item in items:
            number = _parse_int(item)
            if number is None or number < 1:
                self.fail(f"expected comma-separated positive integers, got {item!r}", param, ctx)
            out.append(number)
        return tuple(out)


class RopeOffsetsType(click.ParamType):
    """``log`` or non-negative offsets as for IndexSelectionType, e.g. ``0,1,2,4`` or ``0-8``."""

    name = "offsets"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.strip().lower() == "log":
            return "log"
        return IndexSelectionType().convert(value, param, ctx)


class IndexSelectionType(click.ParamType):
    """Non-negative indices as a list and/or ranges: ``0,1,5``, ``0-3`` or ``0-3,7``.

    Ranges stay ``range`` objects (never expanded here): the data checks their ends,
    so ``0-100000000`` on a 2-layer model is refused at once.
    """

    name = "indices"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[range, ...]:
        if isinstance(value, tuple):
            return value
        out: list[range] = []
        for item in (part.strip() for part in str(value).split(",")):
            if not item:
                continue
            low, dash, high = item.partition("-")
            first, last = (_parse_int(low), _parse_int(high)) if dash else (_parse_int(item),) * 2
            if first is None or last is None or first < 0 or last < first:
                self.fail(f"expected indices such as 0,1,5 or 0-3, got {item!r}", param, ctx)
            out.append(range(first, last + 1))
        if not out:
            self.fail("expected indices such as 0,1,5 or 0-3", param, ctx)
        return tuple(out)


class HeadType(click.ParamType):
    """One head as ``LAYER,HEAD``, e.g. ``3,7``."""

    name = "layer,head"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[int, int]:
        if isinstance(value, tuple):
            return value
        numbers = [_parse_int(part) for part in str(value).split(",")]
        if len(numbers) != 2 or any(x is None or x < 0 for x in numbers):
            self.fail(
                f"expected LAYER,HEAD as two non-negative integers, e.g. 3,7, got {value!r}", param, ctx
            )
        return numbers[0], numbers[1]  # type: ignore[return-value]


def _parse_int(text: str) -> int | None:
    """An integer written plainly or as an integral float such as ``1e5``; None otherwise."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return None
    if not math.isfinite(number) or number != int(number):
        return None
    return int(number)


def validated_by(lookup: Any) -> Any:
    """A click callback that rejects a law spec ``lookup`` refuses, at parse time (exit 2)."""

    def callback(ctx: click.Context, param: click.Parameter, value: str) -> str:
        try:
            lookup(value)
        except QKEnergyError as error:
            raise click.BadParameter(one_line(error), ctx=ctx, param=param) from None
        return value

    return callback


# Memory of one Monte Carlo sample or lobe entry, for the checks below: a null-law sample
# holds 25 statistics (8 bytes each) plus a sorted copy; a lobe entry two lobes and their sorts.
BYTES_PER_NULL_SAMPLE = 400
BYTES_PER_LOBE_ENTRY = 32
BYTES_PER_REPEAT = 512  # one child SeedSequence and its generator


def fits_in_memory(bytes_each: int) -> Any:
    """A click callback refusing a count (or the largest of a list) whose memory would be absurd (exit 2)."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return value
        count = max(value) if isinstance(value, tuple) else value
        try:
            check_memory(count * bytes_each, str(count))
        except QKEnergyError as error:
            raise click.BadParameter(one_line(error), ctx=ctx, param=param) from None
        return value

    return callback


def parse_entry_law(spec: str) -> Any:
    from qkenergy.math.entry_laws import entry_law

    return entry_law(spec)


def parse_positive_law(spec: str) -> Any:
    from qkenergy.math.lobes import positive_law

    return positive_law(spec)


F = TypeVar("F", bound=Callable[..., Any])


def draws_option(
    flag: str, *, default: int | None, help: str, show_default: bool = False
) -> Callable[[F], F]:
    """A count of null-law draws (--samples, --rotation-samples): at least 2, refused at parse time when
    its memory would be absurd (exit 2)."""
    return click.option(
        flag,
        type=click.IntRange(min=2),
        default=default,
        show_default=show_default,
        callback=fits_in_memory(BYTES_PER_NULL_SAMPLE),
        help=help,
    )


@dataclass(frozen=True)
class NullOptions:
    """The null options of a command line as the library takes them: whether laws are drawn, and how."""

    drawn: bool  # not --no-null
    spec: NullSpec
    samples: int | None  # --samples as given (None: left at its default)


def _cut_option(flag: str, default: float, help: str) -> Callable[[F], F]:
    """A tolerance of the head-type rules, in [0, 1)."""
    type_ = click.FloatRange(min=0, max=1, max_open=True)
    return click.option(flag, type=type_, default=default, show_default=True, help=help)


def null_options(command: F) -> F:
    """The options analyze and survey share: seed, null kind and the head-type rule with its tolerances.

    The command receives them as two objects: ``null`` (:class:`NullOptions`, with --samples and
    --rotation-samples, which each command declares with its own default and help) and ``types``
    (a :class:`~qkenergy.analysis.type_rule.TypeRule`).
    """
    options = [
        click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Random seed."),
        click.option("--no-null", is_flag=True, help="Skip the random null laws (no z-scores or p-values)."),
        click.option(
            "--null",
            "null_kind",
            type=click.Choice(null_kinds()),
            default="gaussian",
            show_default=True,
            help="Null law: a Gaussian head of the same shape, the head's own W_K, W_Q with the query's "
            "input space rotated at random (Haar), or both.",
        ),
        _cut_option("--radius", RADIUS, "Type II radius of --type-rule radius: c_sym + d_sym at most this."),
        click.option(
            "--type-rule",
            type=click.Choice(["imbalance", "radius"]),
            default="imbalance",
            show_default=True,
            help="How head_type is named: 'imbalance', the paper's published rule (Type II when c + d <= "
            "--edge-cut, else I+ / I- when (c - d)/(c + d) is above --imbalance-cut / below minus it, II in "
            "between), or 'radius' (Type II when c_sym + d_sym <= --radius, else the sign of c_sym - d_sym).",
        ),
        _cut_option(
            "--imbalance-cut",
            IMBALANCE_CUT,
            "Imbalance rule: Type I+ above this imbalance (c - d)/(c + d), I- below minus it.",
        ),
        _cut_option("--edge-cut", EDGE_CUT, "Imbalance rule: Type II whenever c + d is at most this."),
    ]

    @functools.wraps(command)
    def with_objects(*args: Any, **values: Any) -> Any:
        from qkenergy.analysis.nullspec import ROTATION_SAMPLES, NullSpec
        from qkenergy.analysis.type_rule import TypeRule

        samples, rotation_samples = values.pop("samples"), values.pop("rotation_samples")
        spec = NullSpec(
            samples=DEFAULT_BASELINE_SAMPLES if samples is None else samples,
            seed=values.pop("seed"),
            kind=values.pop("null_kind"),
            rotation_samples=ROTATION_SAMPLES if rotation_samples is None else rotation_samples,
        )
        values["null"] = NullOptions(drawn=not values.pop("no_null"), spec=spec, samples=samples)
        values["types"] = TypeRule(
            values.pop("type_rule"), values.pop("imbalance_cut"), values.pop("edge_cut"), values.pop("radius")
        )
        return command(*args, **values)

    wrapped: Any = with_objects
    for option in reversed(options):  # click lists the options in the order they are declared
        wrapped = option(wrapped)
    return wrapped  # type: ignore[no-any-return]


def cache_dir_option(what: str) -> Callable[[F], F]:
    """--cache-dir, holding ``what``: the command receives a Path, :func:`default_cache_dir` when not given."""
    return click.option(
        "--cache-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        callback=lambda ctx, param, value: default_cache_dir() if value is None else value,
        help=f"{what} (default: $XDG_CACHE_HOME/qkenergy or ~/.cache/qkenergy).",
    )
