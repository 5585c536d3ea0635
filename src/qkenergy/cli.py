"""The qkenergy command line: verify, baseline, lobes, analyze, plot, survey, report, layouts.

Errors are one line on stderr, ``qkenergy: error: <message>``: bad command-line
arguments exit with status 2, library errors (QKEnergyError) with status 1.
The library modules are imported inside the commands so that ``--help`` and
argument errors stay fast.
"""

from __future__ import annotations

import atexit
import gc
import json
import math
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import numpy as np

from qkenergy.errors import ArgumentError, QKEnergyError, check_memory
from qkenergy.formatting import format_number, json_safe, print_table, rich_table
from qkenergy.interrupt import Interrupted, signals_raise

PROG = "qkenergy"
QUANTILE_LEVELS: tuple[float, ...] = (0.01, 0.05, 0.5, 0.95, 0.99)
BASELINE_STATISTICS: tuple[str, ...] = ("symmetric_energy", "pairing", "lobe_departure")
DEFAULT_BASELINE_SAMPLES = 2_000  # as nulls.null_law and analyze: shares their cache
DEFAULT_LOBE_REPEATS = 20


# ---------------------------------------------------------------------------
# Argument types


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
        parts = [part.strip() for part in str(value).split(",")]
        numbers = [_parse_int(part) for part in parts]
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


def _validated_by(lookup: Any) -> Any:
    """A click callback that rejects a law spec ``lookup`` refuses, at parse time (exit 2)."""

    def callback(ctx: click.Context, param: click.Parameter, value: str) -> str:
        try:
            lookup(value)
        except QKEnergyError as error:
            raise click.BadParameter(_one_line(error), ctx=ctx, param=param) from None
        return value

    return callback


# Memory of one Monte Carlo sample or lobe entry, for the checks below: a null-law sample
# holds 25 statistics (8 bytes each) plus a sorted copy; a lobe entry two lobes and their sorts.
_BYTES_PER_NULL_SAMPLE = 400
_BYTES_PER_LOBE_ENTRY = 32
_BYTES_PER_REPEAT = 512  # one child SeedSequence and its generator


def _fits_in_memory(bytes_each: int) -> Any:
    """A click callback refusing a count (or the largest of a list) whose memory would be absurd (exit 2)."""

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None:
            return value
        count = max(value) if isinstance(value, tuple) else value
        try:
            check_memory(count * bytes_each, str(count))
        except QKEnergyError as error:
            raise click.BadParameter(_one_line(error), ctx=ctx, param=param) from None
        return value

    return callback


def _entry_law(spec: str) -> Any:
    from qkenergy.math.entry_laws import entry_law

    return entry_law(spec)


def _positive_law(spec: str) -> Any:
    from qkenergy.math.lobes import positive_law

    return positive_law(spec)


def _one_line(error: BaseException | str) -> str:
    return " ".join(str(error).split())


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/qkenergy, or ~/.cache/qkenergy."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "qkenergy"


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def _stdout_console() -> Any:
    from rich.console import Console

    return Console()


# ---------------------------------------------------------------------------
# Commands


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.version_option(package_name="qkenergy", prog_name=PROG)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Symmetric and skew energy of attention heads, judged against exact random-matrix baselines."""
    if ctx.invoked_subcommand is None:  # bare `qkenergy`: the help, not an error
        click.echo(ctx.get_help())


@cli.command()
@click.option(
    "--samples",
    type=click.IntRange(min=50),
    default=None,
    callback=_fits_in_memory(_BYTES_PER_NULL_SAMPLE),
    help="Monte Carlo draws per row.  [default: 100000, verify.DEFAULT_SAMPLES]",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Random seed.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of the checks instead of a table.")
@click.pass_context
def verify(ctx: click.Context, samples: int | None, seed: int, as_json: bool) -> None:
    """Check every claim of the specification numerically (exit 0 exactly when all pass)."""
    from qkenergy.analysis import verify as verification

    options: dict[str, Any] = {"seed": seed, "progress": not as_json and sys.stderr.isatty()}
    if samples is not None:
        options["samples"] = samples
    checks = verification.run_checks(**options)
    if as_json:
        click.echo(json.dumps([json_safe(_check_record(check)) for check in checks], indent=1))
    else:
        _print_checks(checks)
    ctx.exit(0 if all(check.passed for check in checks) else 1)


def _check_record(check: Any) -> dict[str, Any]:
    """A verify.Check as a dict, with its derived z and error."""
    return {
        "claim": check.claim,
        "setting": check.setting,
        "theory": check.theory,
        "estimate": check.estimate,
        "stderr": check.stderr,
        "z": check.z,
        "error": check.error,
        "passed": bool(check.passed),
        "note": check.note,
    }


# Below this width verify prints one line per check (setting shortened) instead of the full table.
WIDE_VERIFY = 120


def _deviation(check: Any) -> str:
    if check.z is not None:
        return f"z={check.z:+.2f}"
    if check.error is not None:
        return f"err={format_number(check.error, 3)}"
    return ""


def _print_checks(checks: Sequence[Any]) -> None:
    from rich.markup import escape

    console = _stdout_console()
    caption = (
        "Monte Carlo rows pass within 5 standard errors (z), Lemma 5 rows when the largest "
        "relative error is below 1e-10, KS rows (estimate = p-value) when p > 0.001; "
        "the rows marked 'expected departure' pass when the departure is significant."
    )
    if console.width < WIDE_VERIFY:
        _print_checks_narrow(checks, console, caption)
    else:
        table = rich_table(
            "qkenergy verify: the claims of the specification, checked numerically",
            [
                ("claim", "left"),
                ("setting", "left"),
                "theory",
                "estimate",
                "stderr",
                "z or error",
                ("status", "center"),
            ],
            caption=caption,
        )
        for check in checks:
            setting = escape(check.setting)
            if check.note and (check.theory is None or "expected departure" in check.note):
                # rows whose z or error column does not tell the whole story carry their note
                setting += f"\n[dim]{escape(check.note)}[/]"
            table.add_row(
                escape(check.claim),
                setting,
                format_number(check.theory),
                format_number(check.estimate),
                format_number(check.stderr, 3),
                _deviation(check),
                "[green]pass[/]" if check.passed else "[bold red]FAIL[/]",
            )
        print_table(console, table)
    failed = sum(not check.passed for check in checks)
    console.print(
        f"{len(checks) - failed} of {len(checks)} checks passed" + (f", {failed} FAILED" if failed else "")
    )


def _print_checks_narrow(checks: Sequence[Any], console: Any, caption: str) -> None:
    """One line per check, setting cut to the console width: readable at 80 columns and in a pipe."""
    from rich.markup import escape

    claim_width = max(len(c.claim) for c in checks)
    deviation_width = max(len(_deviation(c)) for c in checks)
    console.print("qkenergy verify: the claims of the specification, checked numerically")
    console.print(escape(f"{'':4}  {'claim':<{claim_width}}  {'z or error':>{deviation_width}}  setting"))
    for check in checks:
        line = f"{'pass' if check.passed else 'FAIL'}  {check.claim:<{claim_width}}  "
        line += f"{_deviation(check):>{deviation_width}}  " + " ".join(check.setting.split())
        if len(line) > console.width:
            line = line[: console.width - 1] + "…"
        status = "[green]pass[/]" if check.passed else "[bold red]FAIL[/]"
        console.print(status + escape(line[4:]), soft_wrap=True)
    console.print(f"{caption} Settings are shortened to fit the width; --json gives every detail.")


@cli.command()
@click.option(
    "--n", "head_dim", type=click.IntRange(min=1), required=True, help="Head dimension n (rows of W_Q, W_K)."
)
@click.option(
    "--N", "model_dim", type=click.IntRange(min=1), required=True, help="Model (residual) dimension N."
)
@click.option(
    "--dist",
    default="gaussian",
    show_default=True,
    callback=_validated_by(_entry_law),
    help="Entry law of W_Q and W_K: gaussian, rademacher, uniform, exponential, lognormal, "
    "bernoulli:p, student_t:nu.",
)
@click.option(
    "--samples",
    type=click.IntRange(min=2),
    default=DEFAULT_BASELINE_SAMPLES,
    callback=_fits_in_memory(_BYTES_PER_NULL_SAMPLE),
    show_default=True,
    help="Random heads drawn.",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Random seed.")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Gaussian null-law cache (default: $XDG_CACHE_HOME/qkenergy or ~/.cache/qkenergy).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object instead of a table.")
def baseline(
    head_dim: int, model_dim: int, dist: str, samples: int, seed: int, cache_dir: Path | None, as_json: bool
) -> None:
    """The random baseline of a head of shape (n, N) (Corollary 2, Proposition 6)."""
    if head_dim > model_dim:
        raise click.BadParameter(
            f"expected n <= N (Proposition 6), got n = {head_dim} > N = {model_dim}", param_hint="'--n'"
        )
    from qkenergy.math import nulls

    try:
        nulls.check_null_memory(head_dim, model_dim, samples)
    except QKEnergyError as error:
        raise click.UsageError(_one_line(error)) from None
    result = random_head_baseline(
        head_dim,
        model_dim,
        dist=dist,
        samples=samples,
        seed=seed,
        cache_dir=cache_dir if cache_dir is not None else default_cache_dir(),
        progress=not as_json and sys.stderr.isatty(),
    )
    if as_json:
        click.echo(json.dumps(result, indent=1))
    else:
        _print_baseline(result)


def random_head_baseline(
    n: int,
    N: int,
    *,
    dist: str = "gaussian",
    samples: int = DEFAULT_BASELINE_SAMPLES,
    seed: int = 0,
    cache_dir: Path | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Baseline of a random head of shape (n, N) as a JSON-ready dict (Corollary 2, Proposition 6).

    Gaussian entries: the exact null sampler (nulls.null_law) and the exact mean
    (N+1)/(2N) of the symmetric energy (Proposition 6), stderr 0. Other entry
    laws: W_K, W_Q simulated directly; the expectation of the ratio is then a
    Monte Carlo estimate that may differ from the ratio of expectations
    (N+1)/(2N) of Corollary 2, and both are reported.
    """
    from qkenergy.analysis import null_cache
    from qkenergy.math import baselines, entry_laws, montecarlo, nulls

    law = entry_laws.entry_law(dist)
    ratio_of_expectations = baselines.qk_product_expectations(n, N).symmetric_ratio
    if law.name == "gaussian":
        null = null_cache.null_law(n, N, samples=samples, seed=seed, cache_dir=cache_dir, progress=progress)
        columns = {name: null.samples(name) for name in BASELINE_STATISTICS}
        exact = {"symmetric_energy": baselines.gaussian_head_ratio_expectations(n, N).symmetric}
        energy_rows = None
    else:
        values = montecarlo.draw(
            lambda rng, size: nulls.direct_gram(rng, n, N, size, law),
            samples,
            seed=seed,
            chunk_size=max(montecarlo.BLOCK_SIZE, _MAX_CHUNK_VALUES // (4 * n * n)),
            transform=lambda G: _head_columns(G, N),
            progress=progress,
            description=f"random {law.spec} heads n={n} N={N}",
        )
        columns = {name: values[:, i] for i, name in enumerate(BASELINE_STATISTICS)}
        exact = {}
        energy_rows = values[:, len(BASELINE_STATISTICS) :]
    result: dict[str, Any] = {
        "n": n,
        "N": N,
        "dist": law.spec,
        "samples": samples,
        "seed": seed,
        "sampler": _sampler_name(law.name, n, N),
    }
    for name in BASELINE_STATISTICS:
        x = np.asarray(columns[name], dtype=np.float64)
        x = x[np.isfinite(x)]  # undefined statistics (NaN) are left out, as in nulls.NullLaw
        sample_mean = float(np.mean(x)) if x.size else math.nan
        sample_stderr = float(np.std(x, ddof=1) / math.sqrt(x.size)) if x.size > 1 else math.nan
        row: dict[str, Any] = {
            "mean": exact.get(name, sample_mean),
            "stderr": 0.0 if name in exact else sample_stderr,
            "sd": float(np.std(x, ddof=1)) if x.size > 1 else math.nan,
            "quantiles": {
                _quantile_key(q): float(v)
                for q, v in zip(
                    QUANTILE_LEVELS,
                    np.quantile(x, QUANTILE_LEVELS) if x.size else [math.nan] * len(QUANTILE_LEVELS),
                )
            },
            "defined_samples": int(x.size),
        }
        if name == "symmetric_energy":
            row["ratio_of_expectations"] = ratio_of_expectations
            row["expectation_of_ratio"] = row["mean"]
            row["expectation_of_ratio_stderr"] = row["stderr"]
            if energy_rows is not None:
                # E||S||^2 / E||L||^2 estimated from the same draws: Corollary 2 says it is exact for every law
                estimate = montecarlo.estimate_ratio(energy_rows[:, 1], energy_rows[:, 0])
                row["ratio_of_expectations_estimate"] = estimate.value
                row["ratio_of_expectations_estimate_stderr"] = estimate.stderr
                row["departure_z"] = (
                    (row["mean"] - ratio_of_expectations) / row["stderr"] if row["stderr"] > 0 else math.nan
                )
            row["sample_mean"] = sample_mean
            row["sample_stderr"] = sample_stderr
        result[name] = json_safe(row)
    return result


def _sampler_name(law: str, n: int, N: int) -> str:
    if law != "gaussian":
        return "direct simulation of W_K, W_Q (Monte Carlo)"
    route = "Bartlett-Wishart" if 2 * n <= N else "C C^T, since N < 2n"
    return f"exact Gaussian null law ({route})"


# Hand the statistics chunks of Gram matrices of bounded size (as nulls.null_law does).
_MAX_CHUNK_VALUES = 1 << 24


def _head_columns(G: np.ndarray, N: int) -> np.ndarray:
    """Baseline statistics of a chunk of Gram matrices, then ||L||^2 and ||S||^2 (Gram route)."""
    from qkenergy.math import gram, statistics

    energy = gram.gram_energies(G)
    return np.column_stack(
        [statistics.gram_statistics(G, N).stack(BASELINE_STATISTICS), energy.norm_l_sq, energy.norm_s_sq]
    )


def _print_baseline(result: dict[str, Any]) -> None:
    how = "exact sampler" if result["dist"] == "gaussian" else "Monte Carlo"
    # One column per statistic and one row per quantity: fits 80 columns with every digit.
    table = rich_table(
        f"Random baseline of a head: n = {result['n']}, N = {result['N']}, {result['dist']} "
        f"entries ({how}, {result['samples']} samples)",
        [("", "left"), *BASELINE_STATISTICS],
    )
    for column in table.columns:
        column.no_wrap = True
    rows: list[tuple[str, Any]] = [
        ("mean", lambda row: format_number(row["mean"])),
        ("stderr", lambda row: format_number(row["stderr"], 3)),
        ("sd", lambda row: format_number(row["sd"], 4)),
        *(
            (f"quantile {q:g}", lambda row, q=q: format_number(row["quantiles"][_quantile_key(q)], 4))
            for q in QUANTILE_LEVELS
        ),
    ]
    for label, cell in rows:
        table.add_row(label, *(cell(result[name]) for name in BASELINE_STATISTICS))
    console = _stdout_console()
    print_table(console, table)
    energy = result["symmetric_energy"]
    console.print(
        f"ratio of expectations E||S||²/E||L||² = (N+1)/(2N) = {format_number(energy['ratio_of_expectations'])} "
        "(Corollary 2, every entry law)"
    )
    if result["dist"] == "gaussian":
        console.print(
            f"expectation of the ratio E[||S||²/||L||²] = {format_number(energy['expectation_of_ratio'])} exactly "
            f"(Proposition 6); sampled mean {format_number(energy['sample_mean'])} ± "
            f"{format_number(energy['sample_stderr'], 2)}"
        )
    else:
        console.print(
            f"expectation of the ratio E[||S||²/||L||²] = {format_number(energy['expectation_of_ratio'])} ± "
            f"{format_number(energy['expectation_of_ratio_stderr'], 2)} (Monte Carlo; z = "
            f"{format_number(energy['departure_z'], 3)} against (N+1)/(2N)); ratio of expectations estimated from "
            f"the same draws {format_number(energy['ratio_of_expectations_estimate'])} ± "
            f"{format_number(energy['ratio_of_expectations_estimate_stderr'], 2)}"
        )


def _quantile_key(level: float) -> str:
    return f"{level:g}"


@cli.command()
@click.option(
    "--law",
    default="exponential",
    show_default=True,
    callback=_validated_by(_positive_law),
    help="Positive law of the lobe entries: exponential, half_normal, lognormal, chi, pareto:alpha.",
)
@click.option(
    "--rho",
    type=click.FloatRange(min=0, min_open=True),
    default=0.5,
    show_default=True,
    help="Scale ratio rho = u/v of the two lobes.",
)
@click.option(
    "--n",
    "ns",
    type=IntListType(),
    callback=_fits_in_memory(_BYTES_PER_LOBE_ENTRY),
    default="10,100,1000,100000",
    show_default=True,
    help="Lobe lengths, comma-separated.",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Random seed.")
@click.option(
    "--repeats",
    type=click.IntRange(min=2),
    callback=_fits_in_memory(_BYTES_PER_REPEAT),
    default=DEFAULT_LOBE_REPEATS,
    show_default=True,
    help="Independent pairs of lobes per length.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
def lobes(law: str, rho: float, ns: tuple[int, ...], seed: int, repeats: int, as_json: bool) -> None:
    """Lemma 6: the departure D_n = ||beta_n - rho alpha_n|| / ||alpha_n|| of two sorted iid lobes."""
    from qkenergy.math import lobes as lobe_module

    curve = lobe_module.lobe_departure_curve(law, rho, list(ns), seed=seed, repeats=repeats)
    rows = [
        (int(n), float(m), float(s), float(med))
        for n, m, s, med in zip(curve.ns, curve.mean, curve.stderr, curve.median)
    ]
    if as_json:
        click.echo(
            json.dumps(
                [json_safe({"n": n, "mean": m, "stderr": s, "median": med}) for n, m, s, med in rows],
                indent=1,
            )
        )
        return
    finite = lobe_module.positive_law(law).finite_second_moment
    table = rich_table("Lemma 6: lobe departure D_n", ["n", "D_n mean", "stderr", "median"])
    for n, mean, stderr, median in rows:
        table.add_row(f"{n:,}", format_number(mean), format_number(stderr, 3), format_number(median))
    console = _stdout_console()
    print_table(console, table)
    console.print(
        f"D_n = ||beta_n - rho alpha_n|| / ||alpha_n|| for two sorted iid samples of the {curve.law} law "
        f"at scales 1 and rho = {rho:g}, {repeats} repeats; "
        + (
            "finite second moment: D_n -> 0 almost surely."
            if finite
            else "infinite second moment: Lemma 6 does not apply, D_n need not tend to 0."
        )
    )


F = TypeVar("F", bound=Callable[..., Any])


def _null_options(command: F) -> F:
    """The options analyze and survey share: seed, null kind and the type II radius."""
    options = [
        click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Random seed."),
        click.option("--no-null", is_flag=True, help="Skip the random null laws (no z-scores or p-values)."),
        click.option(
            "--null",
            "null_kind",
            type=click.Choice(["gaussian", "rotation", "both"]),
            default="gaussian",
            show_default=True,
            help="Null law: a Gaussian head of the same shape, the head's own W_K, W_Q with the query's "
            "input space rotated at random (Haar), or both.",
        ),
        click.option(
            "--radius",
            type=click.FloatRange(min=0, max=1, max_open=True),
            default=0.02,
            show_default=True,
            help="Type II radius: c_sym + d_sym at most this.",
        ),
    ]
    for option in reversed(options):  # click lists the options in the order they are declared
        command = option(command)
    return command


@cli.command()
@click.argument("model", required=False)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the per-head table here (.csv, .parquet or .json).",
)
@click.option(
    "--plot",
    "plot_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write the figures into this directory.",
)
@click.option(
    "--per-layer",
    is_flag=True,
    help="Also analyse each layer's whole form sum_h W_K^h^T W_Q^h, with the symmetry "
    "score 2s - 1 and the directionality of Saponati et al. 2025, each against the law of "
    "a Gaussian layer of the same shape; written to <output>.layers.<ext>.",
)
@click.option(
    "--fold-norm",
    is_flag=True,
    help="Fold the gain of the norm feeding attention into the form (L -> D L D, as TransformerLens does).",
)
@click.option(
    "--layers", type=IndexSelectionType(), default=None, help="Layers to analyze, e.g. 0,1,5 or 0-3."
)
@click.option("--heads", type=IndexSelectionType(), default=None, help="Heads to analyze, e.g. 0,1,5 or 0-3.")
@click.option(
    "--samples",
    type=click.IntRange(min=2),
    default=None,
    callback=_fits_in_memory(_BYTES_PER_NULL_SAMPLE),
    help="Null-law samples per head shape (cached per shape).  [default: 2000]",
)
@_null_options
@click.option(
    "--rotation-samples",
    type=click.IntRange(min=2),
    callback=_fits_in_memory(_BYTES_PER_NULL_SAMPLE),
    default=None,
    help="Rotation-null draws per head (not cached).  [default: 500]",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Null-law cache (default: $XDG_CACHE_HOME/qkenergy or ~/.cache/qkenergy).",
)
@click.option(
    "--model-type",
    default=None,
    metavar="TYPE",
    help="Read MODEL as this supported model_type, whatever its config.json says.",
)
@click.option(
    "--layout",
    "layout_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="TOML layout file for an architecture qkenergy does not ship (see docs/models.md).",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="Threads for heads and null samples, BLAS on one thread each (default: every available core).",
)
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Name this many most symmetric and most skew heads in the summary (0: none).",
)
@click.option(
    "--rope-offsets",
    type=RopeOffsetsType(),
    default=None,
    help="RoPE models: also read each head at these relative offsets d (L_d = W_K^T R_d W_Q), "
    "e.g. 0,1,2,4, or 'log' for 0, 1, 2, 4, ... up to the context length; adds an offset column.",
)
@click.option("--quiet", is_flag=True, help="No summary and no progress bar.")
def analyze(
    model: str | None,
    output: Path | None,
    plot_dir: Path | None,
    per_layer: bool,
    fold_norm: bool,
    layers: tuple[int, ...] | None,
    heads: tuple[int, ...] | None,
    samples: int | None,
    seed: int,
    no_null: bool,
    null_kind: str,
    rotation_samples: int | None,
    radius: float,
    cache_dir: Path | None,
    model_type: str | None,
    layout_file: Path | None,
    threads: int | None,
    top: int,
    rope_offsets: Any,
    quiet: bool,
) -> None:
    """Analyze every head of MODEL (file, directory, shards, HF cache folder or hub id; default: embedded MiniLM).

    Every column of the table and every term of the summary is explained in
    docs/columns.md, the mathematics behind them in docs/mathematics.md.
    """
    from qkenergy.analysis import analyze as analysis
    from qkenergy.analysis import report
    from qkenergy.analysis.outputs import write_outputs

    if output is not None and output.suffix.lower() not in report.FORMATS:
        raise click.BadParameter(
            f"expected a file ending in {', '.join(report.FORMATS)}, got {str(output)!r}",
            param_hint="'-o' / '--output'",
        )
    options: dict[str, Any] = {}
    if samples is not None:
        options["samples"] = samples
    if rotation_samples is not None:
        options["rotation_samples"] = rotation_samples
    result = analysis.analyze_model(
        model,
        model_type=model_type,
        layout=layout_file,
        rope_offsets=rope_offsets,
        layers=layers,
        heads=heads,
        per_layer=per_layer,
        fold_norm=fold_norm,
        seed=seed,
        radius=radius,
        null=not no_null,
        null_kind=null_kind,
        cache_dir=cache_dir if cache_dir is not None else default_cache_dir(),
        progress=not quiet and sys.stderr.isatty(),
        threads=threads,
        **options,
    )
    if not quiet:
        report.print_summary(result, _stdout_console(), top=top)
    # the tables, their settings and the figures land together or not at all
    written = write_outputs(
        result,
        output=output,
        plot_dir=plot_dir,
        **_plot_options(samples=samples, seed=seed, cache_dir=cache_dir),
    )
    if not quiet:
        for path in written:
            click.echo(f"wrote {path}", err=True)


@cli.command()
@click.argument("results", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    "outdir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory for the figures.",
)
@click.option("--head", type=HeadType(), default=None, help="Also plot this head in detail, as LAYER,HEAD.")
@click.option(
    "--samples",
    type=click.IntRange(min=2),
    default=None,
    callback=_fits_in_memory(_BYTES_PER_NULL_SAMPLE),
    help="Null-law samples for the overlays.",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Random seed.")
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Null-law cache (default: $XDG_CACHE_HOME/qkenergy or ~/.cache/qkenergy).",
)
def plot(
    results: Path,
    outdir: Path,
    head: tuple[int, int] | None,
    samples: int | None,
    seed: int,
    cache_dir: Path | None,
) -> None:
    """Plot a results table written by ``qkenergy analyze -o`` (its recorded settings label the figures)."""
    from qkenergy.analysis import plots, report

    table = report.read_table(results)
    options = _plot_options(samples=samples, seed=seed, cache_dir=cache_dir)
    for path in plots.plot_results(table, outdir, head=head, **options):
        click.echo(f"wrote {path}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array instead of a table.")
@click.option("--markdown", is_flag=True, help="Print a markdown table (the README's list).")
def layouts(as_json: bool, markdown: bool) -> None:
    """List the supported model types: stacks, positions, qk-norm, and how each is proven."""
    from qkenergy.formatting import markdown_table
    from qkenergy.weights.layouts import LAYOUT_COLUMNS, describe_families

    rows = describe_families()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    elif markdown:
        click.echo(markdown_table(LAYOUT_COLUMNS, rows))
    else:
        table = rich_table("qkenergy layouts: supported model types", [(c, "left") for c in LAYOUT_COLUMNS])
        for row in rows:
            table.add_row(*(row[c] for c in LAYOUT_COLUMNS))
        _stdout_console().print(table)


def _plot_options(*, samples: int | None, seed: int, cache_dir: Path | None) -> dict[str, Any]:
    """plots.plot_results options from the command line: null-law samples, seed and cache."""
    options: dict[str, Any] = {
        "seed": seed,
        "cache_dir": cache_dir if cache_dir is not None else default_cache_dir(),
    }
    if samples is not None:
        options["null_samples"] = samples
    return options


@cli.command()
@click.argument("manifest", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Survey directory: heads/ (and layers/) Parquet datasets, ledger.sqlite, survey.json.",
)
@click.option("--per-layer", is_flag=True, help="Also analyse each layer's whole form (OUT/layers/).")
@click.option(
    "--samples",
    type=click.IntRange(min=2),
    default=DEFAULT_BASELINE_SAMPLES,
    show_default=True,
    callback=_fits_in_memory(_BYTES_PER_NULL_SAMPLE),
    help="Null-law samples per head shape (one law per shape per survey).",
)
@_null_options
@click.option(
    "--rotation-samples",
    type=click.IntRange(min=2),
    callback=_fits_in_memory(_BYTES_PER_NULL_SAMPLE),
    default=500,
    show_default=True,
    help="Rotation-null draws per head (with --null rotation or both).",
)
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="Retries of a failing unit before it is reported.",
)
@click.option(
    "--scheduler",
    metavar="ADDRESS",
    default=None,
    help="Submit to this running Dask scheduler (e.g. tcp://head:8786) instead of a local cluster.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes of the local cluster.  [default: one per core]",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Null-law cache, read and written by this process (default: $XDG_CACHE_HOME/qkenergy or ~/.cache/qkenergy).",
)
@click.option("--quiet", is_flag=True, help="No progress display and no summary.")
def survey(
    manifest: Path,
    out: Path,
    per_layer: bool,
    samples: int,
    seed: int,
    no_null: bool,
    null_kind: str,
    rotation_samples: int,
    radius: float,
    retries: int,
    scheduler: str | None,
    workers: int | None,
    cache_dir: Path | None,
    quiet: bool,
) -> None:
    """Analyse every layer of every model of MANIFEST on Dask, restartably (see docs/survey.md).

    MANIFEST: a TOML file of [[model]] tables or a text file with one source per line.
    Rerunning the same command does only what is missing.
    """
    import signal

    from qkenergy.surveys import engine, load_survey
    from qkenergy.surveys.summary import print_survey

    def terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # SIGTERM (a batch system's cancel) unwinds like Ctrl-C: the cluster is stopped, in-flight units released.
    signal.signal(signal.SIGTERM, terminate)
    try:
        run = engine.survey(
            manifest,
            out,
            per_layer=per_layer,
            samples=samples,
            seed=seed,
            null=not no_null,
            null_kind=null_kind,
            rotation_samples=rotation_samples,
            radius=radius,
            retries=retries,
            scheduler=scheduler,
            workers=workers,
            cache_dir=cache_dir if cache_dir is not None else default_cache_dir(),
            progress=not quiet and sys.stderr.isatty(),
        )
    except KeyboardInterrupt:
        _fail(f"interrupted; the finished units are kept in {out}: rerun the same command to resume", 130)
    if not quiet:
        heads = load_survey(out)[0] if run.units > len(run.failed) else None
        print_survey(run, heads, _stdout_console())
    if not run.ok:
        sys.exit(1)


@cli.command("report")
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The report page (.html); its PNG / SVG figures and CSV tables go to <name>_files/ beside it.",
)
@click.option(
    "--baseline",
    "reference",
    default=None,
    help="Compare every model of the same architecture with this model, head by head.",
)
@click.option("--title", default=None, help="Title of the page.")
@click.option("--no-static", is_flag=True, help="Skip the PNG / SVG figures (they need Chrome or Chromium).")
def report_command(
    sources: tuple[Path, ...], output: Path, reference: str | None, title: str | None, no_static: bool
) -> None:
    """Compare models in one report: a survey's OUT directory, or head tables from `analyze -o`."""
    from qkenergy.analysis import survey_report

    if output.suffix.lower() not in (".html", ".htm"):
        raise click.BadParameter(
            f"expected a file ending in .html, got {str(output)!r}", param_hint="'-o' / '--output'"
        )
    inputs = survey_report.read_inputs(sources)
    result = survey_report.build_report(
        inputs.heads,
        inputs.layers,
        output,
        baseline=reference,
        models=inputs.models,
        settings=inputs.settings,
        title=title,
        static=not no_static,
    )
    click.echo(f"wrote {result.html} ({len(result.summary)} models, {len(result.figures)} figures)")
    click.echo(f"wrote {len(result.files)} files in {result.directory}")


# ---------------------------------------------------------------------------
# Entry point


def _fail(message: str, status: int) -> NoReturn:
    click.echo(f"{PROG}: error: {_one_line(message)}", err=True)
    sys.exit(status)


def _warning_line(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """warnings.showwarning for the command line: ``qkenergy: warning: <message>``, one line."""
    click.echo(f"{PROG}: warning: {_one_line(str(message))}", err=True)


def _keep_freed_memory() -> None:
    """glibc only: serve arrays below 256 MiB from the heap and keep freed memory up to 1 GiB.

    By default glibc maps every block above a threshold (at most 32 MiB) afresh
    and unmaps it when freed, so each layer's Q/K arrays fault their pages in
    again (a llama-sized query tensor is 33.5 MB): 2 to 9 % of a whole run.
    Reused heap memory costs no faults, and the peak stays that of one layer
    and the next. A process-wide setting, so the command line makes it, not the
    library; other C libraries are left alone.
    """
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return
    except (ValueError, OSError):
        return
    import ctypes

    mallopt = ctypes.CDLL(None).mallopt
    mallopt(-3, 256 << 20)  # M_MMAP_THRESHOLD
    mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD


def _no_collection_at_exit() -> None:
    """Freeze every object as the interpreter exits, so that its final collections skip them.

    Python's shutdown runs full garbage collections over every object still alive
    (some 26,000 after an analyze run; its finalisation took 24 ms, 9 ms frozen),
    only to free memory the process is about to return anyway. Registered with
    atexit, so it acts at the very end of the process and nowhere else: a test
    suite or a program calling :func:`main` many times collects as usual
    (finalizers of objects caught in reference cycles are not run at exit, which
    Python does not promise anyway).
    """
    atexit.unregister(gc.freeze)  # once, however often main runs
    atexit.register(gc.freeze)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console entry point: run the command line and exit with its status.

    Every failure is one line on stderr. Set QKENERGY_DEBUG=1 to get the traceback of an
    unexpected exception (a bug, or an input class not checked yet) instead of its one line.
    """
    _keep_freed_memory()
    _no_collection_at_exit()
    with warnings.catch_warnings(), signals_raise():
        warnings.showwarning = _warning_line
        _run(argv)


def _run(argv: Sequence[str] | None) -> NoReturn:
    try:
        status = cli.main(
            args=list(argv) if argv is not None else None, prog_name=PROG, standalone_mode=False
        )
    except Interrupted as interrupt:  # SIGINT / SIGTERM: clean-ups have run on the way up
        _fail(str(interrupt), 128 + interrupt.signum)
    except click.UsageError as error:  # includes BadParameter, NoSuchOption, MissingParameter
        _fail(_one_line(error.format_message()), 2)
    except ArgumentError as error:  # e.g. --layers beyond the checkpoint's layers
        _fail(str(error), 2)
    except QKEnergyError as error:
        _fail(str(error), 1)
    except click.ClickException as error:  # e.g. FileError
        _fail(error.format_message(), 1)
    except click.Abort:
        _fail("aborted", 1)
    except BrokenPipeError:
        # stdout closed by the reader (e.g. `| head`): exit quietly, like other filters do; pointing
        # stdout at /dev/null keeps the interpreter's final flush from complaining
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except OSError as error:
        # A file the library does not check up front (an unwritable cache directory, a full disk):
        # still one line, naming the file.
        _fail(f"{error.filename}: {error.strerror}" if error.filename else str(error), 1)
    except MemoryError:
        _fail("out of memory", 1)
    except Exception as error:  # anything else is a bug or an unchecked input: still one line
        if os.environ.get("QKENERGY_DEBUG", "").strip() not in ("", "0"):
            raise
        _fail(f"unexpected {type(error).__name__}: {error} (set QKENERGY_DEBUG=1 for the traceback)", 1)
    sys.exit(status if isinstance(status, int) else 0)


if __name__ == "__main__":
    main()
