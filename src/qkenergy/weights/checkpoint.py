"""Resolve the MODEL argument to a config dict and a lazy tensor source.

MODEL may be ``None`` (the embedded all-MiniLM-L6-v2, shipped inside
qkenergy: :mod:`qkenergy.weights.embedded`), a ``.safetensors`` file (``config.json`` beside it),
a directory (``model.safetensors``, a sharded ``model.safetensors.index.json``,
or several ``*.safetensors``), a ``.gguf`` file, an ollama blob or a directory
holding one (:mod:`qkenergy.weights.gguf_io`), an embedded model's short name
(``minilm``, ``smollm2``: :mod:`qkenergy.weights.embedded`), a Hugging Face cache folder (``models--org--name``:
the snapshot ``refs/main`` names, or its only snapshot), a Hugging Face Hub id,
or a model in memory (see :mod:`qkenergy.weights.in_memory`). Pickled checkpoints
(``*.bin``, ``*.pt``, ...) are refused without being opened: unpickling runs
arbitrary code.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qkenergy.base.display import show_name, show_path
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.json_input import open_regular, read_object
from qkenergy.weights.embedded import EMBEDDED_MODELS, embedded_path, open_embedded
from qkenergy.weights.gguf_io import _split_parts, gguf_files, is_gguf, one_gguf
from qkenergy.weights.quantization import quantized_tensors, read_quantization
from qkenergy.weights.range_cache import MARKER
from qkenergy.weights.safetensors_io import IndexedShards, SafetensorsFile, TensorSource
from qkenergy.weights.source import CONFIG_NAME, INDEX_NAME, PICKLE_SUFFIXES, ModelSource, is_revision

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

    from qkenergy.weights.hub import HubReference


__all__ = [
    "DEFAULT_MODEL_NAME",
    "open_model",
]


DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
PICKLE_INDEX_NAMES = ("pytorch_model.bin.index.json",)
# config.json and the shard index are kilobytes to a few megabytes in real checkpoints.
MAX_JSON_BYTES = 64 << 20


def open_model(
    model: Any,
    *,
    config: Mapping[str, Any] | None = None,
    revision: str | None = None,
    hub_cache: str | os.PathLike[str] | None = None,
) -> ModelSource:
    """Resolve MODEL (None, file, directory, cache folder, hub id, or in memory) to a :class:`ModelSource`.

    ``config``: the config dict of a mapping of arrays (see :mod:`qkenergy.weights.in_memory`).
    ``revision`` (branch, tag or commit): the snapshot of a hub id or cache folder (default: main).

    Parameters
    ----------
    model : object
        None (the embedded MiniLM), an embedded model's short name, a .safetensors or .gguf
        file, a checkpoint directory, a Hugging Face cache folder, a hub id, a transformers or
        TransformerLens model, or a mapping of tensor names to arrays.
    config : mapping or None
        The config of a mapping of arrays; only for one.
    revision : str or None
        The hub snapshot (branch, tag or commit) of a hub id or cache folder.
    hub_cache : str, path-like or None
        Where a hub model's fetched byte ranges are kept (default:
        :func:`~qkenergy.base.cache_dirs.default_hub_cache`).

    Returns
    -------
    ModelSource
        Close it (or use ``with``) to release the memory maps.

    Raises
    ------
    QKEnergyError
        A path that does not exist or cannot be read, an argument that does not apply to the
        kind of model (``config``, ``revision``), or a checkpoint that cannot be read.
    """
    from qkenergy.weights import in_memory

    if in_memory.is_in_memory(model):
        return in_memory.open_in_memory(model, config)
    if config is not None:
        raise QKEnergyError("config= is only for a mapping of arrays; a checkpoint has its own config.json")
    path = None if model is None else Path(os.fspath(model)).expanduser()
    cache = path is not None and _is_cache_folder(path)
    if revision is not None and (path is None or (path.exists() and not cache)):
        raise QKEnergyError(
            f"{show_path(os.fspath(model or DEFAULT_MODEL_NAME))}: a revision ({revision!r}) applies only "
            "to a hub id or a Hugging Face cache folder (models--ORG--NAME)"
        )
    if path is None:  # the package data folder holding config.json
        return _open_dir(embedded_path("minilm").parent, DEFAULT_MODEL_NAME, "embedded")
    text = os.fspath(model)
    if text in EMBEDDED_MODELS and not path.exists():
        if revision is not None:
            raise QKEnergyError(f"{text}: an embedded model has no revisions (got {revision!r})")
        return open_model(None) if text == "minilm" else open_embedded(text)
    if cache:
        return _open_dir(_cached_snapshot(path, revision), text, "cache")
    if path.is_dir():
        return _open_dir(path, text, "directory")
    if path.is_file():
        return _open_file(path, text)
    if path.exists():
        raise QKEnergyError(f"{show_path(text)}: not a regular file or directory")
    if (unreachable := _unreachable(path, text)) is not None:
        raise unreachable
    from qkenergy.weights.hub import parse_hub_reference  # the Hub's code only for a hub id

    reference = parse_hub_reference(text)
    if reference is not None:
        return _open_hub(reference, text, revision, hub_cache)
    raise QKEnergyError(f"{show_path(text)}: no such file or directory")


def _unreachable(path: Path, text: str) -> QKEnergyError | None:
    """Why a name that is there cannot be opened (a loop of symbolic links, a link to nothing),
    or None (nothing by that name: perhaps a hub id)."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return QKEnergyError(
                f"{show_path(text)}: a loop of symbolic links (following them never reaches a file or folder)"
            )
        if exc.errno == errno.ENOENT and path.is_symlink():
            return QKEnergyError(
                f"{show_path(text)}: a symbolic link to {show_path(os.readlink(path))}, which does not exist"
            )
    return None


_CACHE_PREFIX = "models--"
# A snapshot folder or ref names one path component: a commit hash, or a name the cache gave it.
_SNAPSHOT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
_REF_LIMIT = 4096  # a ref file holds one commit hash (41 bytes)


def _is_cache_folder(path: Path) -> bool:
    return path.is_dir() and path.name.startswith(_CACHE_PREFIX) and (path / "snapshots").is_dir()


def _cached_snapshot(repo: Path, revision: str | None = None) -> Path:
    """The snapshot of a Hugging Face cache folder that refs/main names, or its only snapshot.

    With ``revision``: the snapshot refs/<revision> names, or snapshots/<revision> (a commit).
    A revision, and the commit a ref file names, must be names (never a path: no ``..``, no
    leading ``/``), the ref file a small regular file; the snapshot is a directory inside
    ``snapshots/``, and every symbolic link in it leads into the folder's ``blobs/``.
    """
    if revision is not None and not is_revision(revision):
        raise QKEnergyError(
            f"{show_path(repo)}: revision {show_name(revision, 60)} is not a branch, tag or commit name"
        )
    name = revision or "main"
    ref = repo / "refs" / name
    if ref.is_file() or (ref.exists() and not ref.is_dir()):
        commit = _read_ref(ref)
        if not _SNAPSHOT_NAME.fullmatch(commit) or commit in (".", ".."):
            raise QKEnergyError(
                f"{show_path(ref)}: does not name a snapshot (expected one commit hash, {len(commit)} "
                "characters found)"
            )
        chosen = repo / "snapshots" / commit
        if not chosen.is_dir():
            raise QKEnergyError(
                f"{show_path(ref)} names snapshot {commit!r}, which is not in {show_path(repo / 'snapshots')}"
            )
    elif revision is not None:
        chosen = repo / "snapshots" / revision
        if not _SNAPSHOT_NAME.fullmatch(revision) or not chosen.is_dir():
            raise QKEnergyError(
                f"{show_path(repo)}: Hugging Face cache folder has no ref or snapshot {show_name(revision, 60)}"
            )
    else:
        snapshots = sorted(p for p in (repo / "snapshots").iterdir() if p.is_dir())
        if len(snapshots) != 1:
            raise QKEnergyError(
                f"{show_path(repo)}: Hugging Face cache folder with {len(snapshots)} snapshots and no refs/main; "
                "pass one snapshot folder (snapshots/<commit>) instead"
            )
        chosen = snapshots[0]
    _check_snapshot(repo, chosen)
    return chosen


def _read_ref(ref: Path) -> str:
    """The commit a ref file names: a small regular file of ASCII text (never echoed at length)."""
    where = show_path(ref)
    try:
        with open_regular(ref, where, _REF_LIMIT) as fh:
            raw = fh.read(_REF_LIMIT + 1)
    except OSError as exc:
        raise QKEnergyError(f"{where}: cannot read ({exc.strerror or exc})") from None
    try:
        return raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise QKEnergyError(f"{where}: not a ref file (expected the text of a commit hash)") from None


def _check_snapshot(repo: Path, snapshot: Path) -> None:
    """The snapshot lies in the folder's snapshots/ and its links lead into the folder's blobs/."""
    try:
        snapshots, blobs = (repo / "snapshots").resolve(), (repo / "blobs").resolve()
        real = snapshot.resolve()
    except (OSError, RuntimeError) as exc:  # a loop of links
        raise QKEnergyError(f"{show_path(snapshot)}: cannot resolve ({exc})") from None
    if real.parent != snapshots:
        raise QKEnergyError(
            f"{show_path(snapshot)}: leads outside {show_path(repo / 'snapshots')} (to {show_path(real)})"
        )
    for entry in real.rglob("*"):
        if entry.is_symlink():
            try:
                target = entry.resolve()
            except (OSError, RuntimeError):
                target = entry  # a loop: refused below
            if not target.is_relative_to(blobs):
                raise QKEnergyError(
                    f"{show_path(entry)}: a link out of the cache folder's blobs/ (to {show_path(target)}); "
                    "a Hugging Face cache snapshot links only to its own blobs"
                )


def _is_pickle(path: Path) -> bool:
    return path.suffix.lower() in PICKLE_SUFFIXES or path.name in PICKLE_INDEX_NAMES


def _pickle_error(path: Path) -> QKEnergyError:
    return QKEnergyError(
        f"{show_path(path)}: pickled PyTorch checkpoints are not loaded (unpickling can run "
        "arbitrary code); convert it to safetensors, e.g. "
        "model.save_pretrained(dir, safe_serialization=True)"
    )


def _read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from a checkpoint file, through the bounded reader of json_input."""
    return read_object(path, show_path(path), what, MAX_JSON_BYTES)


def _config(root: Path, weights: Path) -> dict[str, Any]:
    path = root / CONFIG_NAME
    if not path.is_file():
        raise QKEnergyError(
            f"{show_path(path)}: not found; config.json (beside {show_path(weights.name)}) is needed "
            "to know the architecture"
        )
    return _read_json(path, "the config")


def _build(
    root: Path,
    weights: list[Path],
    name: str,
    origin: str,
    files: Callable[[], TensorSource] | None = None,
) -> ModelSource:
    """The source of safetensors ``weights`` with the config in ``root``; ``files`` opens them
    (default: each file's header read now, :class:`TensorSource`)."""
    config = _config(root, weights[0])
    # the quantisation first: a refused method costs no header reads
    quantization = read_quantization(config, show_path(root / CONFIG_NAME), root)
    opened = TensorSource(weights) if files is None else files()
    tensors, notes = quantized_tensors(opened, quantization, show_path(root / CONFIG_NAME))
    return ModelSource(name, config, tensors, root, origin, notes=notes)


def _open_file(path: Path, name: str) -> ModelSource:
    if _is_pickle(path):
        raise _pickle_error(path)
    if path.name == INDEX_NAME:
        return _open_dir(path.parent, name, "directory")
    if path.suffix.lower() == ".gguf" or is_gguf(path):  # ollama's blobs have no suffix
        from qkenergy.weights.gguf_archs import open_gguf  # the GGUF layouts, for a GGUF file only

        return open_gguf(path, name, "file")
    return _build(path.parent, [path], name, "file")


def _open_dir(root: Path, name: str, origin: str) -> ModelSource:
    mirror = next((p for p in (root, *root.parents) if (p / MARKER).is_file()), None)
    if mirror is not None:
        raise QKEnergyError(
            f"{show_path(root)}: inside qkenergy's hub range cache ({show_path(mirror)}), whose files hold "
            "only the byte ranges fetched; analyse the model by its hub id instead"
        )
    if (root / "model.safetensors").is_file():
        return _build(root, [root / "model.safetensors"], name, origin)
    if (root / INDEX_NAME).is_file():
        return _open_index(root, name, origin)
    shards = sorted(p for p in root.glob("*.safetensors") if p.is_file())
    if shards:
        return _build(root, shards, name, origin)
    ggufs = gguf_files(root)
    if ggufs:
        from qkenergy.weights.gguf_archs import open_gguf

        return open_gguf(one_gguf(root, ggufs), name, origin)
    pickles = sorted(p for p in root.iterdir() if p.is_file() and _is_pickle(p))
    if pickles:
        preferred = [p for p in pickles if p.name.startswith("pytorch_model")]
        raise _pickle_error((preferred or pickles)[0])
    unreadable = [p.name for p in sorted(root.glob("*.safetensors")) if not p.is_file()]
    blobs = [p.name for p in sorted(root.glob("sha256-*")) if p.is_file()]
    seen = (
        f"; {show_name(unreadable[0])} is not a readable file (a broken or looping symbolic link?)"
        if unreadable
        else f"; none of its {len(blobs)} sha256-* blobs is a GGUF file"
        if blobs
        else ""
    )
    raise QKEnergyError(
        f"{show_path(root)}: no weights found (expected model.safetensors, {INDEX_NAME}, "
        f"*.safetensors shards, a *.gguf file, or the GGUF blob of an ollama blobs folder){seen}"
    )


def _shard_names(root: Path) -> tuple[dict[str, str], list[str]]:
    """The shard index's weight map (tensor -> shard) and its shards in order, checked."""
    index_path = root / INDEX_NAME
    index = _read_json(index_path, "the shard index")
    weight_map = index.get("weight_map")
    if (
        not isinstance(weight_map, dict)
        or not weight_map
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items())
    ):
        raise QKEnergyError(
            f'{show_path(index_path)}: expected a non-empty "weight_map" object of '
            "tensor name -> shard file name"
        )
    shards = list(dict.fromkeys(weight_map.values()))
    for shard in shards:
        # Shards must live in the checkpoint directory, not anywhere the index points.
        if Path(shard).is_absolute() or ".." in Path(shard).parts:
            raise QKEnergyError(
                f"{show_path(index_path)}: shard {show_name(shard)} must be a file name inside the directory"
            )
    return weight_map, shards


def _open_index(root: Path, name: str, origin: str) -> ModelSource:
    index_path = root / INDEX_NAME
    weight_map, shards = _shard_names(root)
    absent = next((shard for shard in shards if not (root / shard).is_file()), None)
    if absent is not None:
        raise QKEnergyError(
            f"{show_path(index_path)}: lists shard {show_name(absent)}, which does not exist or is not a regular file"
        )
    source = _build(root, [root / shard for shard in shards], name, origin)
    tensors = source.tensors
    # each tensor's shard by name (92k tensors in DeepSeek-V3: a name per shard, not per tensor)
    shard_of = {tensor: sf.path.name for sf in getattr(tensors, "files", ()) for tensor in sf.names}
    for tensor, shard in weight_map.items():
        where = shard_of.get(tensor)
        if where != Path(shard).name:
            source.close()
            found = f"it is in {where!r}" if where else "no listed shard holds it"
            raise QKEnergyError(
                f"{show_path(index_path)}: maps tensor {show_name(tensor)} to {show_name(shard)} but {found}"
            )
    return source


def _open_hub(
    reference: HubReference, name: str, revision: str | None, cache: str | os.PathLike[str] | None
) -> ModelSource:
    """A hub model read by byte range through its mirror (:mod:`qkenergy.weights.hub`)."""
    from qkenergy.weights.hub import SMALL_FILES, HubRepo

    if revision is not None and reference.revision not in (None, revision):
        raise QKEnergyError(
            f"{name}: names revision {reference.revision!r} and `revision` {revision!r}; give one"
        )
    if revision is not None:
        reference = dataclasses.replace(reference, revision=revision)
    snapshot = _hf_cache_snapshot(reference)
    if snapshot is not None and _holds_model(snapshot, reference.filename):
        # the Hugging Face cache holds the model whole at this revision: read there, online or offline
        if reference.filename is not None:
            return _open_file(snapshot / reference.filename, name)
        return _open_dir(snapshot, name, "cache")
    repo = HubRepo(reference, None if cache is None else Path(os.fspath(cache)), local=snapshot)
    try:
        kind, weights = repo.weights()
        for small in SMALL_FILES:
            repo.small_file(small)
        if kind == "gguf":
            from qkenergy.weights.gguf_archs import open_gguf

            first = Path(weights[0])
            split = _split_parts(first)
            # a split model's parts: gguf_model finds them beside the first
            for part in map(Path, repo.files):
                found = _split_parts(part)
                if split and found and part.parent == first.parent and found[0] == split[0]:
                    repo.mirror(part.as_posix())
            with repo.reading_headers():
                source = open_gguf(repo.mirror(first.as_posix()).path, name, "hub", repo.fetcher)
        else:
            if CONFIG_NAME not in repo.files:
                raise QKEnergyError(
                    f"{repo.where}: has no config.json at commit {repo.commit[:12]}; it is needed to know "
                    "the architecture"
                )

            def opener(path: Path) -> SafetensorsFile:
                return SafetensorsFile(path, repo.fetcher(path))

            if kind == "index":  # a shard's header is fetched when one of its tensors is first read
                weight_map, shards = _shard_names(repo.root)
                for shard in shards:
                    if shard not in repo.files:
                        raise QKEnergyError(
                            f"{repo.where}: its {INDEX_NAME} lists shard {show_name(shard)}, which the "
                            f"commit {repo.commit[:12]} does not have"
                        )
                where = f"{repo.where}: {INDEX_NAME}"
                source = _build(
                    repo.root,
                    [repo.root / s for s in shards],
                    name,
                    "hub",
                    lambda: IndexedShards(repo.root, weight_map, opener, where),
                )
            else:
                repo.fetch_headers(weights)
                paths = [repo.mirror(w).path for w in weights]
                source = _build(
                    repo.root, paths, name, "hub", lambda: TensorSource(opener(path) for path in paths)
                )
    except BaseException:
        repo.close()
        raise
    source.remote = repo
    source.notes["hub"] = repo.record  # updated in place as bytes are fetched
    return source


def _hf_cache_snapshot(reference: HubReference) -> Path | None:
    """The Hugging Face cache's snapshot of a hub id at its revision, or None where the cache has none.

    The cache is where huggingface_hub keeps it (``HF_HUB_CACHE``, ``HF_HOME/hub``); the revision
    (default ``main``) is looked up in ``refs/``, a full commit id in ``snapshots/``. A snapshot found
    goes through the checks of a cache folder (inside ``snapshots/``, links only into ``blobs/``).
    """
    from qkenergy.weights.hub import hf_hub_cache

    repo = hf_hub_cache() / f"{_CACHE_PREFIX}{reference.repo_id.replace('/', '--')}"
    if not _is_cache_folder(repo):
        return None
    revision = reference.revision or "main"
    if not is_revision(revision):
        return None  # not a name: the hub route says so
    ref = repo / "refs" / revision
    if not ref.is_file() and not re.fullmatch(r"[0-9a-f]{40}", revision):
        return None
    if not (repo / "snapshots" / (_read_ref(ref) if ref.is_file() else revision)).is_dir():
        return None
    return _cached_snapshot(repo, revision)


def _holds_model(snapshot: Path, filename: str | None) -> bool:
    """Whether a Hugging Face cache snapshot holds every file the reading needs (else the missing ones
    are fetched by range): the file named, or the config and the weights as :func:`_open_dir` reads them."""
    if filename is not None:
        config = filename.endswith(".gguf") or (snapshot / CONFIG_NAME).is_file()
        return config and (snapshot / filename).is_file()
    if gguf_files(snapshot):
        return True
    if not (snapshot / CONFIG_NAME).is_file():
        return False
    if (snapshot / "model.safetensors").exists():
        return (snapshot / "model.safetensors").is_file()
    if (snapshot / INDEX_NAME).is_file():
        try:
            _, shards = _shard_names(snapshot)
        except QKEnergyError:
            return False
        return all((snapshot / shard).is_file() for shard in shards)
    found = list(snapshot.glob("*.safetensors"))
    return bool(found) and all(p.is_file() for p in found)
