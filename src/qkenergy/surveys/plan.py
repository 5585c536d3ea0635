"""Planning a survey: each manifest model resolved to a :class:`ModelPlan`, each unit's action.

The client resolves every model from its headers and config only (stacks,
layers, head shapes, a digest of its settings), checks that a resumed survey
keeps its settings, and decides per (model, layer) unit whether it is done,
to be run, or to be rerun.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qkenergy.base.display import show_path
from qkenergy.base.errors import ArgumentError, QKEnergyError
from qkenergy.base.version import __version__
from qkenergy.surveys.dataset import file_sha256, read_record, unit_path
from qkenergy.surveys.ledger import UnitRow
from qkenergy.surveys.manifest import EMBEDDED, ModelEntry

__all__ = [
    "ModelPlan",
]


SETTINGS = (  # NullSpec.settings, TypeRule.settings and per_layer: a resumed survey keeps them
    "samples",
    "seed",
    "null",
    "null_kind",
    "rotation_samples",
    "radius",
    "type_rule",
    "imbalance_cut",
    "edge_cut",
    "per_layer",
)


@dataclass
class ModelPlan:
    """A manifest model resolved on the client: where its files are, its sizes, its layers.

    Parameters
    ----------
    entry : ModelEntry
        The manifest's model.
    path : str or None, optional
        The resolved checkpoint.
    origin : str or None, optional
        Where it was found (file, directory, cache, hub).
    arch : dict, optional
        Its architecture's settings.
    layers : list of int, optional
        The layers to analyse.
    files_digest : str, optional
        The digest of its files.
    error : str or None, optional
        Why it could not be resolved.
    """

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


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def resolve_entry(entry: ModelEntry, cache_dir: str | os.PathLike[str] | None = None) -> ModelPlan:
    """Open the model's headers and config: sizes, layers to analyse, files digest (no weights read).

    A hub model is pinned to the commit resolved here (``org/name@commit``), so that every worker
    reads the same files, through the range cache under ``cache_dir`` (its ``hub/``) that they share.
    """
    from qkenergy.analysis.record import shape_settings, stack_settings
    from qkenergy.weights.architecture import architectures
    from qkenergy.weights.checkpoint import open_model
    from qkenergy.weights.reading import present_stacks, select

    plan = ModelPlan(entry)
    embedded = entry.source == EMBEDDED and not os.path.exists(entry.source)
    try:
        hub_cache = None if cache_dir is None else Path(cache_dir) / "hub"
        with open_model(
            None if embedded else entry.source, revision=entry.revision, hub_cache=hub_cache
        ) as source:
            # as analyze_model reads them: every attention stack the checkpoint holds
            found = architectures(source.config, source.config_where, layout=source.layout)
            stacks = [a for a, _ in present_stacks(source.tensors, found)]
            arch = stacks[0]
            n_layers = max(a.n_layers for a in stacks)
            plan.origin = source.origin
            if source.remote is not None:  # the weights stay on the Hub: workers read them by range
                plan.path = source.remote.pinned
            else:
                files = sorted({source.tensors.file_of(name).path for name in source.tensors.names})
                plan.path = str(files[0].resolve() if source.origin == "file" else source.root.resolve())
            plan.arch = {
                "model_type": arch.model_type,
                **shape_settings(arch),
                "n_layers": n_layers,  # the deepest stack's
                "stacks": [stack_settings(a) for a in stacks],
            }
            chosen = select(f"{entry.name}: layers", entry.layers, n_layers, "layers")
            # hybrid models: only the layers with softmax attention are units
            plan.layers = [layer for layer in chosen if any(a.has_layer(layer) for a in stacks)]
            if source.remote is not None:  # a commit's files are known by their ETags
                etags = sorted((path, file.etag) for path, file in source.remote.files.items())
                plan.files_digest = digest([source.remote.commit, etags])
            else:
                stats = [
                    (str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in [*files, source.config_path]
                ]
                plan.files_digest = digest(stats)
    except QKEnergyError as error:
        plan.error = str(error)
    except OSError as error:
        plan.error = f"{error.filename}: {error.strerror}" if error.filename else str(error)
    return plan


def check_settings(out: Path, settings: dict[str, Any]) -> None:
    """An OUT made with other global settings is not resumed (its files would mix two surveys)."""
    path = out / "survey.json"
    record = read_record(path)
    if record is None:
        return
    recorded = record.get("settings", {})
    for key in SETTINGS:
        if key in recorded and recorded[key] != settings[key]:
            raise ArgumentError(
                f"{key}: {show_path(out)} holds a survey made with {key} = {recorded[key]!r}, not "
                f"{settings[key]!r}; rerun with the same settings or choose another -o directory",
                parameter=key,
            )


def unit_params(plan: ModelPlan, settings: dict[str, Any]) -> str:
    """Digest of everything that decides a unit's numbers besides its tensors."""
    return digest({"path": plan.path, "fold_norm": plan.entry.fold_norm, "version": __version__, **settings})


def unit_action(row: UnitRow | None, plan: ModelPlan, layer: int, out: Path, settings: dict[str, Any]) -> str:
    """'skip' (done, its files on disk as recorded, checkpoint untouched), 'verify' (checkpoint
    files touched: compare fingerprints on a worker) or 'compute'."""
    if row is None or row.status != "done" or row.params != unit_params(plan, settings):
        return "compute"
    # What is on disk must be what the ledger recorded (a file damaged, truncated or swapped since
    # has another digest): only then is the unit done.
    tables = ("heads", "layers") if settings["per_layer"] else ("heads",)
    for table in tables:
        recorded = row.heads_sha256 if table == "heads" else row.layers_sha256
        if recorded is None or file_sha256(unit_path(out, table, plan.entry.name, layer)) != recorded:
            return "compute"
    return "skip" if row.files_digest == plan.files_digest else "verify"
