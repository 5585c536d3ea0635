"""``qkenergy survey``: many models, one restartable run on Dask distributed.

:func:`survey` plans one unit per (model, layer) (:mod:`qkenergy.surveys.plan`),
skips what the ledger and the output files say is done, and submits the rest to
a Dask cluster (:mod:`qkenergy.surveys.cluster`): a LocalCluster sized to the
machine (one single-threaded worker process per core), or an existing
scheduler. Each distinct (n, N) shape's null law is shared
(:mod:`qkenergy.surveys.shared_nulls`). Workers read the checkpoints at the
paths the client resolved (a shared filesystem); the client writes each unit's
Parquet files atomically, records it in the ledger and retries failed units.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qkenergy.analysis.nullspec import NullSpec
from qkenergy.analysis.record import survey_settings
from qkenergy.analysis.type_rule import TypeRule
from qkenergy.base.display import show_path
from qkenergy.base.errors import QKEnergyError, check_integer
from qkenergy.surveys.cluster import dask_client, early_cluster
from qkenergy.surveys.dataset import clean_partial_files, file_sha256, write_unit
from qkenergy.surveys.display import Display
from qkenergy.surveys.ledger import Ledger, survey_lock
from qkenergy.surveys.manifest import ModelEntry, read_manifest
from qkenergy.surveys.plan import SETTINGS, ModelPlan, check_settings, resolve_entry, unit_action, unit_params
from qkenergy.surveys.shared_nulls import join_law, shared_laws
from qkenergy.surveys.units import UnitResult, UnitSpec, run_unit
from qkenergy.weights.finite import NonFiniteWeights

__all__ = [
    "SETTINGS",
    "SurveyRun",
    "survey",
]


@dataclass
class SurveyRun:
    """What one call of :func:`survey` did (counts over units) and where the results are.

    Parameters
    ----------
    out : Path
        The output directory OUT.
    run : int
        The run's number in the ledger.
    units : int
        Units planned.
    computed : int, optional
        Units analysed.
    unchanged : int, optional
        Units whose tensors had not changed (not analysed again).
    skipped : int, optional
        Units already done.
    heads : int, optional
        Heads analysed.
    failed : list of (str, int, str), optional
        (model, layer, error) of each failed unit.
    model_errors : dict, optional
        Model -> why it could not be planned.
    elapsed : float, optional
        Seconds the run took.
    """

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


def _provenance() -> dict[str, Any]:
    """qkenergy's common provenance keys (version, date, command line), the host and package versions."""
    from importlib.metadata import PackageNotFoundError, version

    from qkenergy.formats.provenance import run_settings

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
    from qkenergy.base.atomic import atomic_path
    from qkenergy.base.formatting import json_safe

    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(json_safe(data), indent=1) + "\n", encoding="utf-8")


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if not isinstance(error, QKEnergyError) else text


def survey(
    manifest: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    null: NullSpec | bool = True,
    null_spec: NullSpec | None = None,
    types: TypeRule | None = None,
    per_layer: bool = False,
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
    others.

    Parameters
    ----------
    manifest : path
        The models: ``[[model]]`` TOML tables or one source per line (docs/survey.md).
    out : path
        The output folder (heads/, layers/, ledger.sqlite, survey.json); read back with
        :func:`qkenergy.load_survey`.
    null : NullSpec or bool
        How every head's null laws are drawn (a :class:`~qkenergy.analysis.nullspec.NullSpec`;
        True: the default spec); False draws none.
    null_spec : NullSpec, optional
        With ``null=False``: still gives the values recorded in the settings.
    types : TypeRule, optional
        The head-type rule (:class:`~qkenergy.analysis.type_rule.TypeRule`, default the published one).
    per_layer : bool
        Also each layer's whole form, as ``analyze_model``.
    retries : int
        Tries of a failed unit after the first.
    scheduler : str, optional
        Address of an existing Dask scheduler; default: a LocalCluster of ``workers``
        single-threaded processes, stopped at the end.
    workers : int, optional
        The LocalCluster's processes (default: one per core).
    cache_dir : path, optional
        The null-law cache (read and written by this process, not by the workers).
    progress : bool
        Show the progress display.

    Returns
    -------
    SurveyRun
        What ran, was skipped or failed, per unit.
    """
    started = time.monotonic()
    drawn, spec = null_settings(null, null_spec)
    types = TypeRule() if types is None else types
    if not isinstance(types, TypeRule):
        raise QKEnergyError(f"types must be a TypeRule, got {types!r:.60}", parameter="types")
    retries = check_integer(retries, "retries", 0)
    if workers is not None:
        workers = check_integer(workers, "workers", 1)
    # what survey.json records (and a resumed survey must keep): the spec's, the rule's, per_layer
    settings = survey_settings(spec, types, null=drawn, per_layer=per_layer)
    shared = SurveySettings(settings, spec, types, settings["null"], settings["per_layer"])
    entries, manifest_sha = read_manifest(manifest)
    out = Path(out)
    if os.path.lexists(out) and not out.is_dir():
        raise QKEnergyError(f"{show_path(out)}: exists and is not a directory; -o names the survey's folder")
    check_settings(out, settings)
    from qkenergy.formats.tables import ensure_directory

    new = not os.path.lexists(out / "ledger.sqlite")
    ensure_directory(out)
    # One survey at a time on OUT, and a ledger checked before any cluster starts.
    with (
        survey_lock(out),
        Ledger(out / "ledger.sqlite") as ledger,
        early_cluster(scheduler, workers, new=new) as early,
    ):
        # The client's own imports (half a second) and planning, while the cluster starts.
        import qkenergy.analysis.analyze  # noqa: F401

        clean_partial_files(out)
        return _plan_and_run(
            manifest,
            manifest_sha,
            entries,
            out,
            shared,
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
    shared: SurveySettings,
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
    settings = shared.settings
    plans = [resolve_entry(entry, cache_dir) for entry in entries]
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
            action = unit_action(row, plan, layer, out, settings)
            if action == "skip":
                result.skipped += 1
            else:
                todo.append((plan, layer, row.fingerprint if action == "verify" and row else None))
    result.run = ledger.start_run(scheduler or "LocalCluster")
    record["run"] = {"run": result.run, "started": time.time()}
    _write_json(out / "survey.json", record)
    status = "interrupted"
    try:
        if todo:
            with dask_client(scheduler, workers, early) as (client, scheduler_text):
                record["engine"] = {
                    "scheduler": scheduler_text,
                    "workers": len(client.scheduler_info()["workers"]),
                }
                _run(client, todo, out, shared, ledger, result, retries, cache_dir, progress)
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


@dataclass(frozen=True)
class SurveySettings:
    """What every unit of a survey shares: the recorded settings and the objects they come from."""

    settings: dict[str, Any]
    null_spec: NullSpec
    types: TypeRule
    null: bool
    per_layer: bool


def null_settings(null: NullSpec | bool, null_spec: NullSpec | None = None) -> tuple[bool, NullSpec]:
    """(whether null laws are drawn, the spec) from ``null`` (a NullSpec, True or False) and ``null_spec``."""
    if isinstance(null, NullSpec):
        if null_spec is not None and null_spec != null:
            raise QKEnergyError(
                "null_spec: give the NullSpec once, as null or as null_spec", parameter="null_spec"
            )
        return True, null
    if not isinstance(null, bool):
        raise QKEnergyError(f"null must be a NullSpec, True or False, got {null!r:.60}", parameter="null")
    if null_spec is not None and not isinstance(null_spec, NullSpec):
        raise QKEnergyError(f"null_spec must be a NullSpec, got {null_spec!r:.60}", parameter="null_spec")
    return null, NullSpec() if null_spec is None else null_spec


def _plan_shapes(plan: ModelPlan) -> set[tuple[int, int]]:
    """The head shapes (n, N) of a model's stacks, per-layer shapes included (gemma4's full layers)."""
    return {
        (int(shape["head_dim"]), int(s["hidden_size"]))
        for s in plan.arch["stacks"]
        for shape in [s, *s.get("layer_shapes", [])]
    }


def _run(
    client: Any,
    todo: list[tuple[ModelPlan, int, str | None]],
    out: Path,
    shared: SurveySettings,
    ledger: Ledger,
    result: SurveyRun,
    retries: int,
    cache_dir: str | os.PathLike[str] | None,
    progress: bool,
) -> None:
    from distributed import as_completed

    cache = None if cache_dir is None else str(cache_dir)
    settings, null_spec = shared.settings, shared.null_spec
    shapes: list[tuple[int, int]] = []
    if shared.null and null_spec.gaussian:
        shapes = sorted({shape for p, _, _ in todo for shape in _plan_shapes(p)})
    laws, drawing = shared_laws(client, shapes, null_spec, cache, result.run)
    block_shape = {future.key: shape for shape, blocks in drawing.items() for future in blocks}
    # Largest layers first: the long tasks start early and the short ones fill the gaps.
    todo = sorted(
        todo, key=lambda t: -t[0].arch["n_heads"] * t[0].arch["head_dim"] * t[0].arch["hidden_size"]
    )
    display = Display(progress, len(todo))
    meta: dict[str, tuple[ModelPlan, UnitSpec, int]] = {}
    waiting: list[tuple[ModelPlan, UnitSpec]] = []

    def shapes_of(plan: ModelPlan) -> set[tuple[int, int]]:
        return _plan_shapes(plan) & set(shapes)

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
            per_layer=shared.per_layer,
            null=shared.null,
            null_spec=null_spec,
            types=shared.types,
            expected_fingerprint=expected,
            cache_dir=cache,
        )
        ledger.mark_running(plan.entry.name, layer, unit_params(plan, settings))
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
                    laws[shape] = join_law(client, shape, drawing.pop(shape), null_spec, cache)
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
                exception = future.exception()
                error = _one_line(exception)
                # the same weights are non-finite at every try: no retry
                final = attempt >= retries or isinstance(exception, NonFiniteWeights)
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
    written: dict[str, str | None] = {}
    if not unit.unchanged:
        extra = {"group": entry.group, "step": entry.step, "source": entry.source, "revision": entry.revision}
        settings = {**(unit.settings or {}), "model": entry.name, **extra}
        for table, frame in (("heads", unit.heads), ("layers", unit.layers)):
            if frame is not None:
                path = write_unit(out, table, entry.name, unit.spec.layer, frame, extra, settings)
                written[f"{table}_file"] = str(path.relative_to(out))
                written[f"{table}_sha256"] = file_sha256(path)
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
        bytes_fetched=None if unit.settings is None else unit.settings.get("hub", {}).get("bytes_fetched"),
        **written,
    )
