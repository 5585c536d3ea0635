"""``qkenergy survey``: many models, one restartable run on Dask distributed.

The client resolves every manifest model (headers and config only), plans
one unit per (model, layer), skips what the ledger and the output files say is
done, and submits the rest to a Dask cluster: a LocalCluster sized to the
machine (one single-threaded worker process per core), or an existing
scheduler. Each distinct (n, N) shape's null law is read from the null cache
or drawn once per survey, split into its seeded Monte Carlo blocks (one task
each, spread over every worker), joined on the client and handed to every
unit of that shape. Workers read the checkpoints at the paths the client
resolved (a shared filesystem); the client writes each unit's Parquet files
atomically, and the joined laws into the null cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import platform
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qkenergy import __version__
from qkenergy.errors import ArgumentError, QKEnergyError, check_integer
from qkenergy.surveys.dataset import clean_partial_files, unit_path, write_unit
from qkenergy.surveys.ledger import Ledger, UnitRow
from qkenergy.surveys.manifest import EMBEDDED, ModelEntry, read_manifest
from qkenergy.surveys.units import UnitResult, UnitSpec, run_null_blocks, run_unit
from qkenergy.weights.safetensors_io import show_path

__all__ = ["SETTINGS", "ModelPlan", "SurveyRun", "survey"]

SETTINGS = ("samples", "seed", "null", "null_kind", "rotation_samples", "radius", "per_layer")
"""Settings that apply to the whole survey: an OUT is only ever resumed with the same values."""


@dataclass
class ModelPlan:
    """A manifest model resolved on the client: where its files are, its sizes, its layers."""

    entry: ModelEntry
    path: str | None = None
    origin: str | None = None
    arch: dict[str, Any] = field(default_factory=dict)
    layers: list[int] = field(default_factory=list)
    files_digest: str = ""
    error: str | None = None

    def record(self) -> dict[str, Any]:
        return {
            **self.entry.record(),
            "path": self.path,
            "origin": self.origin,
            **self.arch,
            "layers": self.layers,
            "status": "failed" if self.error else "ok",
            "error": self.error,
        }


@dataclass
class SurveyRun:
    """What one call of :func:`survey` did (counts over units) and where the results are."""

    out: Path
    run: int
    units: int
    computed: int = 0
    unchanged: int = 0
    skipped: int = 0
    heads: int = 0
    failed: list[tuple[str, int, str]] = field(default_factory=list)  # (model, layer, error)
    model_errors: dict[str, str] = field(default_factory=dict)
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed and not self.model_errors


# ----------------------------------------------------------------------------- planning


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _resolve(entry: ModelEntry) -> ModelPlan:
    """Open the model's headers and config: sizes, layers to analyse, files digest (no weights read)."""
    from qkenergy.analysis.analyze import _present_stacks, _select, _stack_settings
    from qkenergy.weights.checkpoint import open_model
    from qkenergy.weights.layouts import architectures

    plan = ModelPlan(entry)
    embedded = entry.source == EMBEDDED and not os.path.exists(entry.source)
    try:
        with open_model(None if embedded else entry.source, revision=entry.revision) as source:
            # as analyze_model reads them: every attention stack the checkpoint holds
            stacks = [
                a
                for a, _ in _present_stacks(
                    source.tensors, architectures(source.config, source.config_where, layout=source.layout)
                )
            ]
            arch = stacks[0]
            n_layers = max(a.n_layers for a in stacks)
            files = sorted({source.tensors.file_of(name).path for name in source.tensors.names})
            plan.origin = source.origin
            plan.path = str(files[0].resolve() if source.origin == "file" else source.root.resolve())
            plan.arch = {
                "model_type": arch.model_type,
                "n_layers": n_layers,
                "n_heads": arch.n_heads,
                "n_kv_heads": arch.n_kv_heads,
                "head_dim": arch.head_dim,
                "hidden_size": arch.hidden_size,
                "stacks": [_stack_settings(a) for a in stacks],
            }
            plan.layers = _select(f"{entry.name}: layers", entry.layers, n_layers, "layers")
            stats = [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in [*files, source.config_path]]
            plan.files_digest = _digest(stats)
    except QKEnergyError as error:
        plan.error = str(error)
    except OSError as error:
        plan.error = f"{error.filename}: {error.strerror}" if error.filename else str(error)
    return plan


def _settings_check(out: Path, settings: dict[str, Any]) -> None:
    """An OUT made with other global settings is not resumed (its files would mix two surveys)."""
    path = out / "survey.json"
    if not path.is_file():
        return
    try:
        recorded = json.loads(path.read_text(encoding="utf-8")).get("settings", {})
    except (OSError, ValueError, AttributeError):
        raise QKEnergyError(
            f"{show_path(path)}: unreadable; remove it or choose another output directory"
        ) from None
    for key in SETTINGS:
        if key in recorded and recorded[key] != settings[key]:
            option = {"null": "--no-null", "per_layer": "--per-layer", "null_kind": "--null"}.get(
                key, "--" + key.replace("_", "-")
            )
            raise ArgumentError(
                f"{option}: {show_path(out)} holds a survey made with {key} = {recorded[key]!r}, not "
                f"{settings[key]!r}; rerun with the same settings or choose another -o directory"
            )


def _provenance() -> dict[str, Any]:
    """qkenergy's common provenance keys (version, date, command line), the host and package versions."""
    from importlib.metadata import PackageNotFoundError, version

    from qkenergy.analysis.provenance import run_settings

    packages: dict[str, str | None] = {}
    for name in ("numpy", "scipy", "pandas", "pyarrow", "dask", "distributed"):
        try:
            packages[name] = version(name)
        except PackageNotFoundError:
            packages[name] = None
    return run_settings(
        python=sys.version.split()[0], platform=platform.platform(), host=platform.node(), packages=packages
    )


def _write_json(path: Path, data: dict[str, Any]) -> None:
    from qkenergy.analysis.report import atomic_path
    from qkenergy.formatting import json_safe

    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(json_safe(data), indent=1) + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------- cluster


def _local_cluster(workers: int | None) -> Any:
    """A LocalCluster of ``workers`` (default: one per core) single-threaded worker processes."""
    import dask
    from distributed import LocalCluster

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    # No queue on the scheduler: every task goes to a worker at once, which runs its tasks in priority
    # order, so no unit (which depends on a law) overtakes the null-law blocks still queued.
    with dask.config.set({"distributed.scheduler.worker-saturation": math.inf}):
        return LocalCluster(
            n_workers=workers or cores or 1,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            # no dashboard, and its bare HTTP server on a free port (8787 may belong to another cluster)
            scheduler_kwargs={"dashboard_address": ":0"},
            silence_logs=logging.ERROR,
            # the workers import what the units run while they wait for their first task
            preload=["qkenergy.surveys.units", "qkenergy.analysis.analyze"],
        )


@contextlib.contextmanager
def _early_cluster(scheduler: str | None, workers: int | None, new: bool) -> Iterator[Any]:
    """For a new survey on a LocalCluster: the cluster being started in a background thread (a Future).

    Starting worker processes takes seconds; a new survey has work for them,
    so they start while the client resolves the models. The cluster is
    stopped on the way out unless :func:`_client` took it (``None`` taken).
    """
    if scheduler is not None or not new:
        yield None
        return
    from concurrent.futures import ThreadPoolExecutor

    import distributed  # noqa: F401  (imported here, not by the thread: an import holds the GIL)

    with ThreadPoolExecutor(1, thread_name_prefix="qkenergy-cluster-start") as thread:
        starting = thread.submit(_local_cluster, workers)
        holder = [starting]
        try:
            yield holder
        finally:
            if holder[0] is not None:  # not taken: nothing to do, or an error
                with contextlib.suppress(Exception):
                    holder[0].result().close()


@contextlib.contextmanager
def _client(
    scheduler: str | None, workers: int | None, early: list[Any] | None = None
) -> Iterator[tuple[Any, str]]:
    """A Dask client on ``scheduler``, or on a LocalCluster (``early``'s, when one is being started)."""
    from distributed import Client

    if scheduler is not None:
        try:
            client = Client(scheduler, timeout="20s")
        except (OSError, TimeoutError) as error:
            raise QKEnergyError(f"--scheduler {scheduler}: cannot connect ({error})") from None
        with client:
            yield client, scheduler
        return
    if early is not None:
        starting, early[0] = early[0], None  # taken: stopped here
        cluster = starting.result()
    else:
        cluster = _local_cluster(workers)
    with cluster, Client(cluster) as client:
        yield client, f"LocalCluster({len(cluster.workers)} workers x 1 thread)"


class _Display:
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


# ----------------------------------------------------------------------------- the survey


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if not isinstance(error, QKEnergyError) else text


def survey(
    manifest: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    per_layer: bool = False,
    samples: int = 2000,
    seed: int = 0,
    null: bool = True,
    null_kind: str = "gaussian",
    rotation_samples: int = 500,
    radius: float = 0.02,
    retries: int = 2,
    scheduler: str | None = None,
    workers: int | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = False,
) -> SurveyRun:
    """Analyse every layer of every model of MANIFEST on Dask; results in OUT (see docs/survey.md).

    Restartable: a unit (model, layer) whose files exist, whose settings are
    the same and whose tensors are unchanged is never recomputed or rewritten;
    a failed unit is retried ``retries`` times, then reported in the returned
    :class:`SurveyRun` (and the ledger); one failing model never stops the
    others. ``null_kind``, ``rotation_samples``: as for ``analyze_model``. ``scheduler``: address of an existing Dask scheduler; default: a
    LocalCluster of ``workers`` (default: one per core) single-threaded
    processes, stopped at the end. ``cache_dir``: the null-law cache (read and
    written by this process, not by the workers).
    """
    started = time.monotonic()
    samples = check_integer(samples, "--samples", 2)
    seed = check_integer(seed, "--seed", 0)
    retries = check_integer(retries, "--retries", 0)
    rotation_samples = check_integer(rotation_samples, "--rotation-samples", 2)
    if workers is not None:
        workers = check_integer(workers, "--workers", 1)
    settings = {
        "samples": samples,
        "seed": seed,
        "null": bool(null),
        "null_kind": null_kind,
        "rotation_samples": rotation_samples,
        "radius": float(radius),
        "per_layer": bool(per_layer),
    }
    entries, manifest_sha = read_manifest(manifest)
    out = Path(out)
    _settings_check(out, settings)
    with _early_cluster(scheduler, workers, new=not (out / "ledger.sqlite").exists()) as early:
        # The client's own imports (half a second) and planning, while the cluster starts.
        from qkenergy.analysis.analyze import NULL_KINDS
        from qkenergy.analysis.report import ensure_directory

        if null_kind not in NULL_KINDS:
            raise ArgumentError(f"--null must be one of {', '.join(NULL_KINDS)}, got {null_kind!r}")
        ensure_directory(out)
        clean_partial_files(out)
        with Ledger(out / "ledger.sqlite") as ledger:
            return _plan_and_run(
                manifest,
                manifest_sha,
                entries,
                out,
                settings,
                ledger,
                early,
                started,
                retries=retries,
                scheduler=scheduler,
                workers=workers,
                cache_dir=cache_dir,
                progress=progress,
            )


def _plan_and_run(
    manifest: str | os.PathLike[str],
    manifest_sha: str,
    entries: list[ModelEntry],
    out: Path,
    settings: dict[str, Any],
    ledger: Ledger,
    early: list[Any] | None,
    started: float,
    *,
    retries: int,
    scheduler: str | None,
    workers: int | None,
    cache_dir: str | os.PathLike[str] | None,
    progress: bool,
) -> SurveyRun:
    """:func:`survey` once its arguments are checked: resolve the models, plan the units, run them."""
    plans = [_resolve(entry) for entry in entries]
    record: dict[str, Any] = {
        "format": 1,
        "manifest": {"path": str(Path(manifest).resolve()), "sha256": manifest_sha},
        "settings": settings,
        "cache_dir": None if cache_dir is None else str(cache_dir),
        "models": [plan.record() for plan in plans],
        "provenance": _provenance(),
    }
    todo: list[tuple[ModelPlan, int, str | None]] = []
    result = SurveyRun(out=out, run=0, units=0)
    done = ledger.units()
    for plan in plans:
        ledger.record_model(
            plan.entry.name,
            plan.entry.source,
            plan.entry.revision,
            path=plan.path,
            status="failed" if plan.error else "ok",
            error=plan.error,
            files_digest=plan.files_digest or None,
            **{k: v for k, v in plan.arch.items() if k != "stacks"},  # stacks: in survey.json
        )
        if plan.error:
            result.model_errors[plan.entry.name] = plan.error
            continue
        for layer in plan.layers:
            result.units += 1
            row = done.get((plan.entry.name, layer))
            action = _action(row, plan, layer, out, settings)
            if action == "skip":
                result.skipped += 1
            else:
                todo.append((plan, layer, row.fingerprint if action == "verify" and row else None))
    scheduler_text = scheduler or "LocalCluster"
    result.run = ledger.start_run(scheduler_text)
    record["run"] = {"run": result.run, "started": time.time()}
    _write_json(out / "survey.json", record)
    status = "interrupted"
    try:
        if todo:
            with _client(scheduler, workers, early) as (client, scheduler_text):
                record["engine"] = {
                    "scheduler": scheduler_text,
                    "workers": len(client.scheduler_info()["workers"]),
                }
                _run(client, todo, out, settings, ledger, result, retries, cache_dir, progress)
        status = "done" if result.ok else "failed"
    finally:
        ledger.release_running()
        counts = {
            "units": result.units,
            "computed": result.computed,
            "unchanged": result.unchanged,
            "skipped": result.skipped,
            "failed": len(result.failed),
        }
        ledger.finish_run(status, counts)
        result.elapsed = time.monotonic() - started
        record["run"].update(status=status, finished=time.time(), elapsed_s=result.elapsed, **counts)
        _write_json(out / "survey.json", record)
    return result


def _params(plan: ModelPlan, settings: dict[str, Any]) -> str:
    """Digest of everything that decides a unit's numbers besides its tensors."""
    return _digest({"path": plan.path, "fold_norm": plan.entry.fold_norm, "version": __version__, **settings})


def _action(row: UnitRow | None, plan: ModelPlan, layer: int, out: Path, settings: dict[str, Any]) -> str:
    """'skip' (done, files in place, checkpoint untouched), 'verify' (files touched: compare
    fingerprints on a worker) or 'compute'."""
    if row is None or row.status != "done" or row.params != _params(plan, settings):
        return "compute"
    tables = ("heads", "layers") if settings["per_layer"] else ("heads",)
    if not all(unit_path(out, t, plan.entry.name, layer).is_file() for t in tables):
        return "compute"
    return "skip" if row.files_digest == plan.files_digest else "verify"


def _shared_laws(
    client: Any, shapes: list[tuple[int, int]], settings: dict[str, Any], cache_dir: str | None, run: int
) -> tuple[dict[tuple[int, int], Any], dict[tuple[int, int], list[Any]]]:
    """Start every shape's Gaussian null law: (laws already held by every worker, block tasks by shape).

    A law found in the null cache is scattered to every worker at once. A
    law to draw is split into its seeded Monte Carlo blocks, one task each,
    so that every worker draws part of every law (a law as one task would
    leave the other workers idle while that shape's units wait); the blocks
    joined in order are bitwise the law that ``analyze`` draws.
    """
    from qkenergy.analysis.null_cache import cached_null_law
    from qkenergy.math.montecarlo import block_count
    from qkenergy.math.nulls import NULL_STATISTICS

    samples, seed, radius = settings["samples"], settings["seed"], settings["radius"]
    laws: dict[tuple[int, int], Any] = {}
    drawing: dict[tuple[int, int], list[Any]] = {}
    # The dearest laws first (eigenproblems of size 2n per sample): the last block to finish is a cheap one.
    for n, N in sorted(shapes, key=lambda shape: (-shape[0], -shape[1])):
        law = None
        if cache_dir is not None:
            law = cached_null_law(
                n, N, samples=samples, seed=seed, cache_dir=cache_dir, radius=radius, names=NULL_STATISTICS
            )
        if law is not None:
            laws[n, N] = client.scatter(law, broadcast=True, hash=False)
            continue
        drawing[n, N] = [
            client.submit(
                run_null_blocks,
                n,
                N,
                block,
                block + 1,
                samples=samples,
                seed=seed,
                radius=radius,
                key=f"null-n{n}-N{N}-block{block}-run{run}",
                priority=10,  # before any unit: every unit of a shape waits for its whole law
            )
            for block in range(block_count(samples))
        ]
    return laws, drawing


def _join_law(
    client: Any, shape: tuple[int, int], blocks: list[Any], settings: dict[str, Any], cache_dir: str | None
) -> Any:
    """The law of ``shape`` from its finished block tasks: cached once, then scattered to every worker.

    Held by every worker, the law does not pull its units to one of them (a
    unit goes where its dependencies are).
    """
    from qkenergy.analysis.null_cache import store_null_law
    from qkenergy.math.nulls import NULL_STATISTICS, null_law_from_blocks

    law = null_law_from_blocks(*shape, client.gather(blocks), seed=settings["seed"], names=NULL_STATISTICS)
    if cache_dir is not None:
        store_null_law(law, cache_dir, samples=settings["samples"], radius=settings["radius"])
    return client.scatter(law, broadcast=True, hash=False)


def _run(
    client: Any,
    todo: list[tuple[ModelPlan, int, str | None]],
    out: Path,
    settings: dict[str, Any],
    ledger: Ledger,
    result: SurveyRun,
    retries: int,
    cache_dir: str | os.PathLike[str] | None,
    progress: bool,
) -> None:
    from distributed import as_completed

    cache = None if cache_dir is None else str(cache_dir)
    shapes: list[tuple[int, int]] = []
    if settings["null"] and settings["null_kind"] in ("gaussian", "both"):
        shapes = sorted({(s["head_dim"], s["hidden_size"]) for p, _, _ in todo for s in p.arch["stacks"]})
    laws, drawing = _shared_laws(client, shapes, settings, cache, result.run)
    block_shape = {future.key: shape for shape, blocks in drawing.items() for future in blocks}
    # Largest layers first: the long tasks start early and the short ones fill the gaps.
    todo = sorted(
        todo, key=lambda t: -t[0].arch["n_heads"] * t[0].arch["head_dim"] * t[0].arch["hidden_size"]
    )
    display = _Display(progress, len(todo))
    meta: dict[str, tuple[ModelPlan, UnitSpec, int]] = {}
    waiting: list[tuple[ModelPlan, UnitSpec]] = []

    def shapes_of(plan: ModelPlan) -> set[tuple[int, int]]:
        return {(s["head_dim"], s["hidden_size"]) for s in plan.arch["stacks"]} & set(shapes)

    def submit(plan: ModelPlan, spec: UnitSpec, attempt: int) -> Any:
        future = client.submit(
            run_unit,
            spec,
            {shape: laws[shape] for shape in shapes_of(plan) if shape in laws},
            key=f"unit-{plan.entry.name}-{spec.layer}-run{result.run}-try{attempt}",
            pure=False,
        )
        meta[future.key] = (plan, spec, attempt)
        return future

    futures = [future for blocks in drawing.values() for future in blocks]
    for plan, layer, expected in todo:
        spec = UnitSpec(
            model=plan.entry.name,
            layer=layer,
            path=str(plan.path),
            fold_norm=plan.entry.fold_norm,
            expected_fingerprint=expected,
            cache_dir=cache,
            **settings,
        )
        ledger.mark_running(plan.entry.name, layer, _params(plan, settings))
        if shapes_of(plan) & set(drawing):
            waiting.append((plan, spec))
        else:
            futures.append(submit(plan, spec, 0))
    try:
        completed = as_completed(futures)
        for future in completed:
            if future.key in block_shape:
                shape = block_shape.pop(future.key)
                blocks = drawing.get(shape)
                if blocks is None:  # a block of a law already given up
                    continue
                if future.status != "finished":
                    # A law that failed is left to the units (analyze draws it itself).
                    del drawing[shape]
                    client.cancel(blocks)
                elif all(block.status == "finished" for block in blocks):
                    laws[shape] = _join_law(client, shape, drawing.pop(shape), settings, cache)
                else:
                    continue
                for plan, spec in [w for w in waiting if not shapes_of(w[0]) & set(drawing)]:
                    waiting.remove((plan, spec))
                    completed.add(submit(plan, spec, 0))
                continue
            plan, spec, attempt = meta.pop(future.key)
            if future.status == "finished":
                unit = future.result()
                _record(unit, plan, out, ledger, result)
                display.advance(heads=0 if unit.heads is None else len(unit.heads))
            else:
                error = _one_line(future.exception())
                final = attempt >= retries
                ledger.mark_failed(spec.model, spec.layer, error, final=final)
                if final:
                    result.failed.append((spec.model, spec.layer, error))
                    display.advance(failed=True)
                else:
                    ledger.retry(spec.model, spec.layer)
                    completed.add(submit(plan, spec, attempt + 1))
            future.release()
    finally:
        display.close()


def _record(unit: UnitResult, plan: ModelPlan, out: Path, ledger: Ledger, result: SurveyRun) -> None:
    """Write a computed unit's files atomically, then mark it done (files first: the ledger never lies)."""
    entry = plan.entry
    written: dict[str, str] = {}
    if not unit.unchanged:
        extra = {"group": entry.group, "step": entry.step, "source": entry.source, "revision": entry.revision}
        settings = {**(unit.settings or {}), "model": entry.name, **extra}
        path = write_unit(out, "heads", entry.name, unit.spec.layer, unit.heads, extra, settings)
        written["heads_file"] = str(path.relative_to(out))
        if unit.layers is not None:
            path = write_unit(out, "layers", entry.name, unit.spec.layer, unit.layers, extra, settings)
            written["layers_file"] = str(path.relative_to(out))
        result.computed += 1
        result.heads += len(unit.heads)
    else:
        result.unchanged += 1
    ledger.mark_done(
        entry.name,
        unit.spec.layer,
        outcome="unchanged" if unit.unchanged else "computed",
        worker=unit.worker,
        started=unit.started,
        finished=unit.finished,
        fingerprint=unit.fingerprint,
        files_digest=plan.files_digest,
        heads=None if unit.heads is None else len(unit.heads),
        **written,
    )
