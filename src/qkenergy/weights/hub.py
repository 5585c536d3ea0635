"""Models on the Hugging Face Hub, read by byte range (:class:`HubRepo`).

A hub id (``org/name``, ``org/name@revision``, or ``org/name/file.gguf`` for one
GGUF file of a repository) is resolved to one commit through huggingface_hub's
own client (``HfApi.model_info``: the commit, every file's size and ETag; the
user's token as huggingface_hub finds it, ``HF_TOKEN`` or ``hf auth login``).
Then only what the reading needs is fetched, through huggingface_hub's HTTP
helpers (its session, headers, retries) with ``Range`` requests:
``config.json``, the shard index and the quantisation side files whole; each
weight file's header; and, as the analysis reads them, the byte ranges of the
tensors it reads. The bytes land in a :class:`~qkenergy.weights.range_cache.RangeCache`
(a sparse mirror of each file): a rerun, another choice of layers, or a survey
worker on the same file system fetches nothing twice, and with
``HF_HUB_OFFLINE=1`` a model is read from the mirror alone.

A remote header is untrusted input: the mirror is read by the same validating
readers as a local file (:mod:`qkenergy.weights.safetensors_io`,
:mod:`qkenergy.weights.gguf_io`).
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qkenergy.base.errors import QKEnergyError
from qkenergy.base.extras import require
from qkenergy.weights.gguf_io import _split_parts
from qkenergy.weights.json_input import show_name
from qkenergy.weights.range_cache import MirroredFile, RangeCache
from qkenergy.weights.safetensors_io import HEADER_PROBE, MAX_HEADER_BYTES, Fetch, show_path

__all__ = [
    "HubReference",
    "HubRepo",
    "byte_text",
    "default_hub_cache",
    "fetch_summary",
    "hub_offline",
    "parse_hub_reference",
]

INDEX_NAME = "model.safetensors.index.json"
# Small files read whole when the repository has them: the config, the shard index, quantisation side files.
SMALL_FILES = ("config.json", INDEX_NAME, "quantize_config.json", "quant_config.json")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
# More than this in a small file is no config's.
_SMALL_LIMIT = 64 << 20
# Tries of one range when the connection drops in the middle (each resumes where the last stopped).
_TRIES = 4
# Header requests in flight at once.
_HEADER_REQUESTS = 8

_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
_REFERENCE = re.compile(
    rf"^(?P<repo>{_NAME}(?:/{_NAME})?)(?:@(?P<revision>[A-Za-z0-9_][A-Za-z0-9._+-]*))?"
    rf"(?:/(?P<file>(?:{_NAME}/)*{_NAME}\.(?:gguf|safetensors)))?$"
)


@dataclass(frozen=True)
class HubReference:
    """A model on the Hub as MODEL names it: the repository, a revision, a file of it.

    Parameters
    ----------
    repo_id : str
        ``org/name`` (or a bare ``name``).
    revision : str or None
        The branch, tag or commit after ``@``; None for the default branch.
    filename : str or None
        One weight file of the repository (a GGUF file), or None to choose.
    """

    repo_id: str
    revision: str | None = None
    filename: str | None = None


def parse_hub_reference(text: str) -> HubReference | None:
    """``org/name``, ``org/name@revision``, ``org/name/file.gguf`` (or both) as a :class:`HubReference`.

    Parameters
    ----------
    text : str
        MODEL as given (not an existing path).

    Returns
    -------
    HubReference or None
        None when the text cannot be a hub id.
    """
    if text.startswith((".", "~", "/")) or "\\" in text or ".." in text:
        return None
    found = _REFERENCE.match(text)
    if found is None:
        return None
    repo, file = found["repo"], found["file"]
    if file is None and repo.endswith((".safetensors", ".gguf", ".json", *PICKLE_SUFFIXES)):
        return None  # a file name that does not exist, not a repository
    return HubReference(repo, found["revision"], file)


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set (read now, not when huggingface_hub was imported).

    Returns
    -------
    bool
    """
    from huggingface_hub import constants

    flag = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}
    return bool(constants.HF_HUB_OFFLINE) or flag


def default_hub_cache() -> Path:
    """Where fetched byte ranges are kept by default: ``$XDG_CACHE_HOME/qkenergy/hub`` or ``~/.cache/qkenergy/hub``.

    The same folder as the null-law cache's ``hub/``, so that ``--cache-dir DIR`` moves both.

    Returns
    -------
    pathlib.Path
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "qkenergy" / "hub"


@dataclass(frozen=True)
class _RemoteFile:
    path: str  # in the repository
    size: int
    etag: str  # the LFS sha256 of a large file, the git blob id of a small one


class HubRepo:
    """One commit of a Hub repository, read through a byte-range mirror.

    Parameters
    ----------
    reference : HubReference
        What MODEL named.
    cache : pathlib.Path or None
        The mirror's folder (default: :func:`default_hub_cache`).

    Raises
    ------
    QKEnergyError
        huggingface_hub missing, the repository or revision not found, private or gated
        without access, the Hub out of reach, or offline without the repository cached.

    Attributes
    ----------
    commit : str
        The commit read.
    files : dict
        Path -> size and ETag of every file of the commit.
    record : dict
        What the settings record: repository, revision, commit, endpoint, the range
        cache and its bytes, the repository's bytes, the bytes fetched, each file read
        with its size and ETag.
    """

    def __init__(self, reference: HubReference, cache: Path | None = None) -> None:
        # a one-line error before anything else; a local path needs no extra
        require(
            "hub", "huggingface_hub", f"{reference.repo_id}: not a local path; a hub id is read through it"
        )
        self.reference = reference
        self.repo_id = reference.repo_id
        self.offline = hub_offline()
        self.cache = RangeCache(cache if cache is not None else default_hub_cache())
        self._folder = self.cache.root / "models" / self.repo_id
        try:
            self.commit, self.files = self._resolve()
        except BaseException:
            self.cache.close()
            raise
        self.root = self._folder / "snapshots" / self.commit  # the mirror of this commit's files
        self._mirrors: dict[str, MirroredFile] = {}
        self._lock = threading.Lock()
        self.record: dict[str, Any] = {
            "repo_id": self.repo_id,
            "revision": reference.revision or "main",
            "commit": self.commit,
            "endpoint": self._endpoint(),
            "cache": str(self.cache.root),
            "repository_bytes": sum(f.size for f in self.files.values()),
            "bytes_fetched": 0,
            "cache_bytes": self.cache.bytes_present(),  # the range cache's bytes on disk (holes aside)
            "files": {},
        }
        self.on_bytes: Any = None  # called with each chunk's size (the progress bar)

    @property
    def pinned(self) -> str:
        """MODEL naming this very commit (``org/name@commit``, ``/file`` for a file chosen): what survey
        workers open, so that they all read the files the client resolved."""
        file = f"/{self.reference.filename}" if self.reference.filename else ""
        return f"{self.repo_id}@{self.commit}{file}"

    @property
    def where(self) -> str:
        """The repository in a message: ``org/name@revision``."""
        return f"{self.repo_id}@{self.reference.revision}" if self.reference.revision else self.repo_id

    # ------------------------------------------------------------------ the commit and its files

    def _resolve(self) -> tuple[str, dict[str, _RemoteFile]]:
        revision = self.reference.revision or "main"
        ref = self._folder / "refs" / revision
        if self.offline:
            commit = _read_text(ref) if ref.is_file() else revision
            listing = self._folder / "commits" / f"{commit}.json"
            if not re.fullmatch(r"[0-9a-f]{40}", commit) or not listing.is_file():
                raise QKEnergyError(
                    f"{self.where}: HF_HUB_OFFLINE is set and this revision is not in the hub range cache "
                    f"({show_path(self.cache.root)}); run once online, or pass a local path"
                )
            return commit, _files_of(json.loads(listing.read_text()))
        info = self._model_info(revision)
        commit = str(info.sha)
        # what the Hub answers is untrusted: the commit and the paths name files of the range cache
        if not re.fullmatch(r"[0-9a-f]{40}", commit):
            raise QKEnergyError(
                f"{self.where}: the Hub answered commit {show_name(commit, 60)}; expected 40 hexadecimal digits"
            )
        unsafe = next((s.rfilename for s in info.siblings or [] if not _safe_path(s.rfilename)), None)
        if unsafe is not None:
            raise QKEnergyError(
                f"{self.where}: the Hub listed the file {show_name(unsafe, 100)}, which is not a path inside "
                "the repository"
            )
        files = {
            s.rfilename: _RemoteFile(
                s.rfilename, int(s.size or 0), str(s.lfs.sha256 if s.lfs is not None else s.blob_id or "")
            )
            for s in info.siblings or []
        }
        _write_atomic(
            self._folder / "commits" / f"{commit}.json", json.dumps([vars(f) for f in files.values()])
        )
        _write_atomic(ref, commit)
        return commit, files

    def _model_info(self, revision: str) -> Any:
        from huggingface_hub import HfApi

        try:
            return HfApi().model_info(self.repo_id, revision=revision, files_metadata=True)
        except Exception as exc:
            refusal = self.refusal(exc, "its file list")
            if refusal is None:
                raise
            raise refusal from None

    def refusal(self, exc: BaseException, what: str) -> QKEnergyError | None:
        """The Hub's refusal of a request (an exception of huggingface_hub or httpx2) as one line.

        Parameters
        ----------
        exc : BaseException
            What the request raised.
        what : str
            What was asked for, for the message ("its file list", a file).

        Returns
        -------
        QKEnergyError or None
            None for an exception that is neither a refusal nor a transport error (a bug: raised as it is).
        """
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            HFValidationError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        login = "log in with HF_TOKEN or hf auth login"
        if isinstance(exc, GatedRepoError):
            return QKEnergyError(
                f"{self.where}: a gated repository on {self._endpoint()}; accept its conditions on the Hub "
                f"and {login}"
            )
        if isinstance(exc, RevisionNotFoundError):
            return QKEnergyError(
                f"{self.repo_id}: the Hub has no revision {show_name(self.reference.revision or 'main')}"
            )
        if isinstance(exc, RepositoryNotFoundError):
            return QKEnergyError(
                f"{self.where}: no such repository on {self._endpoint()}, or a private one this token "
                f"cannot read ({login}); not a local path either"
            )
        if isinstance(exc, HfHubHTTPError):
            status = getattr(getattr(exc, "response", None), "status_code", None)
            hint = f" ({login})" if status in (401, 403) else ""
            return QKEnergyError(f"{self.where}: the Hub answered HTTP {status} for {what}{hint}")
        if isinstance(exc, HFValidationError):
            return QKEnergyError(f"{show_path(self.where)}: no such file or directory")
        if _is_transport(exc):
            return QKEnergyError(
                f"{self.where}: not a local file or directory, and the Hugging Face Hub "
                f"({self._endpoint()}) could not be reached ({type(exc).__name__}); pass a local path, "
                "or set HF_HUB_OFFLINE=1 to read what the hub range cache holds"
            )
        return None

    @staticmethod
    def _endpoint() -> str:
        from huggingface_hub import constants

        return str(constants.ENDPOINT)

    # ------------------------------------------------------------------ what to read

    def weights(self) -> tuple[str, list[str]]:
        """The kind of weights read ("safetensors", "index" or "gguf") and their files, in order.

        Returns
        -------
        tuple of (str, list of str)

        Raises
        ------
        QKEnergyError
            A file named that the commit lacks, several GGUF files and none chosen, pickles
            only, or no weights at all.
        """
        chosen = self.reference.filename
        if chosen is not None:
            if chosen not in self.files:
                raise QKEnergyError(
                    f"{self.where}: has no file {show_name(chosen)} at commit {self.commit[:12]}"
                    + _listing(" (its weight files: ", [p for p in self.files if _is_weights(p)], ")")
                )
            return ("gguf" if chosen.endswith(".gguf") else "safetensors"), [chosen]
        top = [p for p in self.files if "/" not in p]
        if "model.safetensors" in self.files:
            return "safetensors", ["model.safetensors"]
        if INDEX_NAME in self.files:
            return "index", [INDEX_NAME]
        shards = sorted(p for p in top if p.endswith(".safetensors"))
        if shards:
            return "safetensors", shards
        ggufs = sorted(p for p in self.files if p.endswith(".gguf"))
        choices = [p for p in ggufs if (parts := _split_parts(Path(p))) is None or parts[1] == 1]
        if len(choices) == 1:
            return "gguf", choices
        if choices:
            raise QKEnergyError(
                f"{self.where}: holds {len(choices)} GGUF models; name one, e.g. {self.repo_id}/{choices[0]}"
                + _listing(" (", choices, ")")
            )
        pickles = [p for p in self.files if p.endswith(PICKLE_SUFFIXES)]
        if pickles:
            raise QKEnergyError(
                f"{self.where}: holds only pickled weights ({show_name(pickles[0])}), which are never loaded "
                "(unpickling can run arbitrary code); qkenergy reads safetensors and GGUF"
            )
        raise QKEnergyError(
            f"{self.where}: no safetensors or GGUF weights at commit {self.commit[:12]}"
            + _listing(" (its files: ", list(self.files), ")")
        )

    def small_file(self, path: str) -> Path | None:
        """Fetch a small file whole (config, index, side files); its mirror's path, or None if absent.

        Parameters
        ----------
        path : str
            The file in the repository.

        Returns
        -------
        pathlib.Path or None
        """
        remote = self.files.get(path)
        if remote is None:
            return None
        if remote.size > _SMALL_LIMIT:
            raise QKEnergyError(
                f"{self.where}: {show_name(path)} has {remote.size} bytes; a config or index is at most "
                f"{_SMALL_LIMIT} bytes"
            )
        mirror = self.mirror(path)
        mirror.ensure(0, remote.size)
        return mirror.path

    def mirror(self, path: str) -> MirroredFile:
        """The mirror of one file of the commit (its sparse file made on first use).

        Parameters
        ----------
        path : str
            The file in the repository.

        Returns
        -------
        MirroredFile
        """
        with self._lock:
            mirror = self._mirrors.get(path)
            if mirror is None:
                remote = self.files[path]
                fetch = None if self.offline else self._range_fetch(remote)
                relative = f"models/{self.repo_id}/snapshots/{self.commit}/{path}"
                mirror = self.cache.file(relative, remote.size, remote.etag, fetch)
                mirror.on_bytes = self._counted
                self._mirrors[path] = mirror
                self.record["files"][path] = {"size": remote.size, "etag": remote.etag}
        return mirror

    def fetch_headers(self, paths: list[str]) -> None:
        """Fetch the headers of these safetensors files at once, a few requests in flight.

        Each file's first :data:`~qkenergy.weights.safetensors_io.HEADER_PROBE` bytes, then the
        rest of its header where the length it starts with says so: what opening the shards would
        fetch one after the other (on the Hub a request costs its latency, a checkpoint has
        up to a few hundred shards). The headers are checked when the files are opened.

        Parameters
        ----------
        paths : list of str
            Files of the commit.
        """

        def header(path: str) -> None:
            mirror = self.mirror(path)
            mirror.ensure(0, HEADER_PROBE)
            with open(mirror.path, "rb") as fh:
                length = int.from_bytes(fh.read(8), "little")
            if length <= min(MAX_HEADER_BYTES, mirror.size - 8):  # else opening the file says what is wrong
                mirror.ensure(8, 8 + length)

        with ThreadPoolExecutor(_HEADER_REQUESTS, thread_name_prefix="qkenergy-headers") as pool:
            for done in [pool.submit(header, path) for path in paths]:
                done.result()

    def fetcher(self, local: Path) -> Fetch:
        """The ``fetch`` of a mirror file for the readers (:class:`~qkenergy.weights.safetensors_io.SafetensorsFile`).

        Parameters
        ----------
        local : pathlib.Path
            A file under :attr:`root`.

        Returns
        -------
        callable
            ``fetch(begin, end)``.
        """
        return self.mirror(local.relative_to(self.root).as_posix()).ensure

    def _counted(self, n: int) -> None:
        with self._lock:
            self.record["bytes_fetched"] += n
            self.record["cache_bytes"] += n
        if self.on_bytes is not None:
            self.on_bytes(n)

    def missing_bytes(self, ranges: list[tuple[Path, int, int]]) -> int:
        """Of these (file, begin, end) ranges, the bytes not in the mirror yet (the progress bar's total).

        Parameters
        ----------
        ranges : list of (pathlib.Path, int, int)
            File under :attr:`root` and byte range.

        Returns
        -------
        int
        """
        total = 0
        for local, begin, end in ranges:
            mirror = self.mirror(local.relative_to(self.root).as_posix())
            total += sum(b - a for a, b in mirror.missing(begin, end))
        return total

    def close(self) -> None:
        """Close the mirror's record."""
        self.cache.close()

    # ------------------------------------------------------------------ HTTP

    def _range_fetch(self, remote: _RemoteFile) -> Any:
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import (  # type: ignore[attr-defined]  # exported lazily
            build_hf_headers,
            hf_raise_for_status,
            http_stream_backoff,
        )

        url = hf_hub_url(self.repo_id, remote.path, revision=self.commit)
        where = f"{self.where}: {remote.path}"

        def fetch(begin: int, end: int) -> Iterator[bytes]:
            at, tries, lost = begin, 0, None
            while at < end:
                headers = {**build_hf_headers(), "Range": f"bytes={at}-{end - 1}"}
                try:
                    with http_stream_backoff(
                        "GET", url, headers=headers, max_retries=2, base_wait_time=0.5
                    ) as r:
                        try:
                            hf_raise_for_status(r)
                        except Exception as exc:
                            raise self.refusal(exc, f"{remote.path} (a byte-range request)") or exc from None
                        if r.status_code != 206 and not (at == 0 and end == remote.size):
                            raise QKEnergyError(
                                f"{where}: the server answered HTTP {r.status_code} to a byte-range request "
                                "(expected 206 Partial Content)"
                            )
                        try:
                            for chunk in r.iter_bytes(1 << 20):
                                chunk = chunk[: end - at]
                                at += len(chunk)
                                yield chunk
                                if at >= end:
                                    break
                        except Exception as exc:
                            if not _is_transport(exc):
                                raise
                            lost = exc
                except QKEnergyError:
                    raise
                except Exception as exc:
                    if not _is_transport(exc):
                        raise
                    lost = exc
                if at < end:
                    tries += 1
                    if tries >= _TRIES:
                        raise QKEnergyError(
                            f"{where}: the connection was lost after {at - begin} of the {end - begin} bytes "
                            f"at [{begin}, {end}) ({_TRIES} tries; {type(lost).__name__}); what was fetched "
                            "is kept, run again to resume"
                        )

        return fetch


def fetch_summary(record: dict[str, Any]) -> str:
    """One line on what a hub run fetched: bytes, against the repository's, the commit, the cache.

    Parameters
    ----------
    record : dict
        :attr:`HubRepo.record` (the settings' ``hub`` entry).

    Returns
    -------
    str
    """
    fetched, total = int(record["bytes_fetched"]), int(record["repository_bytes"])
    share = f" ({100 * fetched / total:.3g} %)" if total else ""
    return (
        f"fetched {byte_text(fetched)} of {record['repo_id']}'s {byte_text(total)}{share} by byte range, "
        f"commit {str(record['commit'])[:12]}; range cache {record['cache']} ({byte_text(record['cache_bytes'])})"
    )


def byte_text(n: int) -> str:
    """A byte count in decimal units (B, kB, MB, GB, TB), three significant digits.

    Parameters
    ----------
    n : int

    Returns
    -------
    str
    """
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def _is_transport(exc: BaseException) -> bool:
    """A connection lost, refused or timed out (httpx2's transport errors, or the OS's)."""
    return isinstance(exc, OSError) or any(c.__name__ == "TransportError" for c in type(exc).__mro__)


def _safe_path(path: str) -> bool:
    """A relative path of plain names: not absolute, no empty, `.` or `..` part, no backslash or NUL."""
    parts = path.split("/")
    return (
        bool(path) and "\\" not in path and "\0" not in path and all(p not in ("", ".", "..") for p in parts)
    )


def _is_weights(path: str) -> bool:
    return path.endswith((".safetensors", ".gguf"))


def _listing(before: str, names: list[str], after: str, most: int = 8) -> str:
    if not names:
        return ""
    shown = ", ".join(names[:most]) + (f", ... ({len(names)} in all)" if len(names) > most else "")
    return f"{before}{shown}{after}"


def _files_of(rows: Any) -> dict[str, _RemoteFile]:
    return {r["path"]: _RemoteFile(r["path"], int(r["size"]), str(r["etag"])) for r in rows}


def _read_text(path: Path) -> str:
    return path.read_text(encoding="ascii", errors="replace").strip()[:100]


def _write_atomic(path: Path, text: str) -> None:
    """Write a small cache file whole or not at all (a rename), so that a reader never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)
