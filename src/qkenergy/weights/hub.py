"""Models on the Hugging Face Hub, read by byte range (:class:`HubRepo`).

A hub id (``org/name``, ``org/name@revision``, or ``org/name/file.gguf`` for one
GGUF file of a repository) is resolved to one commit by the Hub's file list
(``GET /api/models/{repo}/revision/{rev}?blobs=true``, the request
``HfApi.model_info`` makes: the commit, every file's size and ETag), asked
through huggingface_hub's HTTP session and headers (the user's token as
huggingface_hub finds it, ``HF_TOKEN`` or ``hf auth login``) and validated
field by field here. Then only what the reading needs is fetched, with
``Range`` requests: ``config.json``, the shard index and the quantisation side
files whole; each weight file's header; and, as the analysis reads them, the
byte ranges of the tensors it reads. The bytes land in a
:class:`~qkenergy.weights.range_cache.RangeCache` (a sparse mirror of each
file): a rerun, another choice of layers, or a survey worker on the same file
system fetches nothing twice, and with ``HF_HUB_OFFLINE=1`` a model is read
from the mirror alone. Files that the Hugging Face cache already holds for the
commit (``hf download``, transformers) are copied from there, not fetched.

Every answer is untrusted and checked where it is read, before a byte of it
enters the mirror: the status, the ``Content-Range`` against the request and
the listed size, the ETag and commit against the listing, no multipart or
encoded body (:meth:`HubRepo._answered`). HTTP errors are named by their status
(429 and 5xx retried, ``Retry-After`` honoured up to a bound); every request
has a connect and read timeout and a minimum transfer rate
(:class:`HubBounds`, set by ``QKENERGY_HUB_*`` environment variables, see
docs/hub.md). A remote header is read by the same validating readers as a
local file (:mod:`qkenergy.weights.safetensors_io`,
:mod:`qkenergy.weights.gguf_io`), and a header whose first bytes are not JSON
is refused before the rest of it is fetched.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import logging
import math
import os
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from qkenergy.base.atomic import OutputError, atomic_path
from qkenergy.base.cache_dirs import default_hub_cache
from qkenergy.base.display import show_name, show_path
from qkenergy.base.errors import QKEnergyError
from qkenergy.base.extras import require
from qkenergy.base.json_input import describe, parse_value, read_bytes
from qkenergy.weights.gguf_io import _split_parts
from qkenergy.weights.range_cache import MirroredFile, RangeCache, plain_path
from qkenergy.weights.safetensors_io import HEADER_PROBE, MAX_HEADER_BYTES, Fetch
from qkenergy.weights.source import INDEX_NAME, PICKLE_SUFFIXES, is_revision

__all__ = [
    "HubBounds",
    "HubReference",
    "HubRepo",
    "byte_text",
    "fetch_summary",
    "hf_hub_cache",
    "hub_endpoint",
    "hub_offline",
    "parse_hub_reference",
    "redact_url",
]

_log = logging.getLogger(__name__)

# Small files read whole when the repository has them: the config, the shard index, quantisation side files.
SMALL_FILES = ("config.json", INDEX_NAME, "quantize_config.json", "quant_config.json")
# More than this in a small file is no config's.
_SMALL_LIMIT = 64 << 20
# A file list larger than this is no model repository's (DeepSeek-V3's, 170 files, is 60 kB).
_LISTING_LIMIT = 64 << 20
# The body of an error answer read for its message.
_ERROR_BODY = 64 << 10
# Tries of one request: a lost connection resumes where it stopped; 429 and 5xx are asked again.
_TRIES = 4
# The wait before the second, third and fourth try when the server names none (Retry-After).
_BACKOFF = 0.5
# Statuses that say "try again": request timeout, too many requests, the server's own failures.
_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# Header requests in flight at once.
_HEADER_REQUESTS = 8
# A GGUF header (metadata and tensor table) is read in steps from the file's start: past this, it is
# no model's (a 256k-token vocabulary with its merges is about 20 MB). Fetches beyond it are refused.
GGUF_HEADER_LIMIT = MAX_HEADER_BYTES

_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]*"
_REFERENCE = re.compile(
    rf"^(?P<repo>{_NAME}(?:/{_NAME})?)(?:@(?P<revision>[A-Za-z0-9_][A-Za-z0-9._+-]*))?"
    rf"(?:/(?P<file>(?:{_NAME}/)*{_NAME}\.(?:gguf|safetensors)))?$"
)
_COMMIT = re.compile(r"[0-9a-f]{40}")
_CONTENT_RANGE = re.compile(r"bytes\s+(\d{1,20})-(\d{1,20})/(\d{1,20}|\*)")

_sleep = time.sleep  # the waits between tries (the tests record them instead)


BOUND_VARIABLES = {
    "timeout": "QKENERGY_HUB_TIMEOUT",
    "min_rate": "QKENERGY_HUB_MIN_RATE",
    "max_wait": "QKENERGY_HUB_MAX_WAIT",
    "lock_timeout": "QKENERGY_HUB_LOCK_TIMEOUT",
}
"""Each field of :class:`HubBounds` and the environment variable that sets it."""


@dataclass(frozen=True)
class HubBounds:
    """The time bounds of hub requests, each set by an environment variable (docs/hub.md).

    Parameters
    ----------
    timeout : float
        ``QKENERGY_HUB_TIMEOUT`` (seconds, default 30): to connect, and between two reads of an
        answer; a request that gets no byte for this long ends the run.
    min_rate : float
        ``QKENERGY_HUB_MIN_RATE`` (bytes per second, default 16384): after the first ``timeout``
        seconds, a range must keep arriving at least this fast (a trickling server ends the run).
    max_wait : float
        ``QKENERGY_HUB_MAX_WAIT`` (seconds, default 60): the longest ``Retry-After`` waited for; a
        server asking for more ends the run at once.
    lock_timeout : float
        ``QKENERGY_HUB_LOCK_TIMEOUT`` (seconds, default 60): the longest wait for the range
        cache's sqlite record held by another process.
    """

    timeout: float = 30.0
    min_rate: float = 16384.0
    max_wait: float = 60.0
    lock_timeout: float = 60.0

    @classmethod
    def from_environment(cls) -> HubBounds:
        """The bounds, each from its variable where set (a positive finite number), else the default.

        Returns
        -------
        HubBounds

        Raises
        ------
        QKEnergyError
            A variable that is not a positive finite number.
        """
        values: dict[str, float] = {}
        for field_name, variable in BOUND_VARIABLES.items():
            text = os.environ.get(variable, "").strip()
            if not text:
                continue
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if not (math.isfinite(value) and value > 0):
                raise QKEnergyError(f"{variable} must be a positive finite number, got {show_name(text, 40)}")
            values[field_name] = value
        return cls(**values)


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


def hf_hub_cache() -> Path:
    """The Hugging Face cache's folder as huggingface_hub resolves it (``HF_HUB_CACHE``, ``HF_HOME/hub``).

    Without huggingface_hub, the same rule read from the environment.

    Returns
    -------
    pathlib.Path
    """
    try:
        from huggingface_hub import constants
    except ImportError:
        home = os.environ.get("HF_HOME") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
        )
        return Path(os.environ.get("HF_HUB_CACHE") or os.path.join(home, "hub")).expanduser()
    return Path(constants.HF_HUB_CACHE).expanduser()


def redact_url(url: str) -> str:
    """``url`` with any user name and password replaced by ``***`` (a private mirror's credentials).

    Parameters
    ----------
    url : str

    Returns
    -------
    str
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<an unreadable URL>"
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"***@{host}"))


def hub_endpoint() -> str:
    """The Hub's address that huggingface_hub uses (``HF_ENDPOINT``), credentials redacted.

    Returns
    -------
    str
    """
    from huggingface_hub import constants

    return redact_url(str(constants.ENDPOINT))


@dataclass(frozen=True)
class _RemoteFile:
    path: str  # in the repository
    size: int
    etag: str  # the LFS sha256 of a large file, the git blob id of a small one


class _Transient(Exception):
    """A request that may succeed when asked again: a lost connection, 408, 429 or 5xx."""

    def __init__(self, cause: str, status: int | None = None, retry_after: float | None = None) -> None:
        super().__init__(cause)
        self.cause, self.status, self.retry_after = cause, status, retry_after


class HubRepo:
    """One commit of a Hub repository, read through a byte-range mirror.

    Parameters
    ----------
    reference : HubReference
        What MODEL named.
    cache : pathlib.Path or None
        The mirror's folder (default: :func:`default_hub_cache`).
    local : pathlib.Path or None
        The Hugging Face cache's snapshot of this revision, if it has one: each file it holds
        whole (its blob named by the listed ETag, of the listed size) is copied from there.

    Raises
    ------
    QKEnergyError
        huggingface_hub missing, the repository or revision not found, private or gated
        without access, the Hub out of reach or answering what no Hub answers, or offline
        without the repository cached.

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

    def __init__(self, reference: HubReference, cache: Path | None = None, local: Path | None = None) -> None:
        # a one-line error before anything else; a local path needs no extra
        require(
            "hub", "huggingface_hub", f"{reference.repo_id}: not a local path; a hub id is read through it"
        )
        self.reference = reference
        self.repo_id = reference.repo_id
        revision = reference.revision or "main"
        if not is_revision(revision):
            raise QKEnergyError(
                f"{self.repo_id}: revision {show_name(revision, 60)} is not a branch, tag or commit name"
            )
        self.bounds = HubBounds.from_environment()
        self.offline = hub_offline()
        self.local = local
        self.cache = RangeCache(
            cache if cache is not None else default_hub_cache(), lock_timeout=self.bounds.lock_timeout
        )
        self._folder = self.cache.root / "models" / self.repo_id
        try:
            self.commit, self.files = self._resolve(revision)
        except BaseException:
            self.cache.close()
            raise
        self.root = self._folder / "snapshots" / self.commit  # the mirror of this commit's files
        self._mirrors: dict[str, MirroredFile] = {}
        self._lock = threading.Lock()
        self._header_phase = 0  # > 0 while GGUF headers are read (their fetches bounded)
        self.record: dict[str, Any] = {
            "repo_id": self.repo_id,
            "revision": revision,
            "commit": self.commit,
            "endpoint": hub_endpoint(),
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

    def _resolve(self, revision: str) -> tuple[str, dict[str, _RemoteFile]]:
        # every path of the cache is checked to lie inside it (a folder of it may be a link elsewhere)
        ref = self.cache.path_of(f"models/{self.repo_id}/refs/{revision}")
        if self.offline:
            commit = (
                ref.read_text(encoding="ascii", errors="replace").strip()[:100] if ref.is_file() else revision
            )
            if not _COMMIT.fullmatch(commit):
                commit = "0" * 40  # no commit: found nowhere below
            listing = self.cache.path_of(f"models/{self.repo_id}/commits/{commit}.json")
            if not listing.is_file():
                raise QKEnergyError(
                    f"{self.where}: HF_HUB_OFFLINE is set and this revision is not in the hub range cache "
                    f"({show_path(self.cache.root)}); run once online, or pass a local path"
                )
            where = f"{show_path(listing)} (the range cache's stored file list; delete it and run online)"
            raw = read_bytes(listing, where, "the stored file list", _LISTING_LIMIT)
            return commit, _files_of(parse_value(raw, where, "the stored file list"), where)
        commit, files = self._listing(revision)
        listing = self.cache.path_of(f"models/{self.repo_id}/commits/{commit}.json")
        _write_atomic(listing, json.dumps([vars(f) for f in files.values()]))
        _write_atomic(ref, commit)
        return commit, files

    def _listing(self, revision: str) -> tuple[str, dict[str, _RemoteFile]]:
        """The commit and its files as the Hub lists them (``model_info`` with ``blobs``), every field checked."""
        from huggingface_hub import constants

        url = f"{constants.ENDPOINT}/api/models/{self.repo_id}/revision/{quote(revision, safe='')}?blobs=true"
        what = "its file list"
        tries, waited, started = 0, 0.0, time.monotonic()
        while True:
            try:
                with self._get(url, {}, what) as r:
                    if r.status_code != 200:
                        raise QKEnergyError(f"{self.where}: the Hub answered HTTP {r.status_code} for {what}")
                    kind = r.headers.get("Content-Type", "")
                    if "json" not in kind.lower():
                        raise QKEnergyError(
                            f"{self.where}: the Hub answered {what} with {show_name(kind or 'no Content-Type', 60)}, "
                            "not JSON (a login or captive-portal page?); check HF_ENDPOINT and the network"
                        )
                    body = bytearray()
                    # decoded if the server compressed it anyway (a false encoding is a DecodingError)
                    for chunk in r.iter_bytes():
                        body += chunk
                        if len(body) > _LISTING_LIMIT:
                            raise QKEnergyError(
                                f"{self.where}: {what} is larger than {_LISTING_LIMIT} bytes; no model's is"
                            )
                        self._check_rate(len(body), time.monotonic() - started - waited, what)
                break
            except _Transient as transient:
                tries += 1
                waited += self._retry(transient, what, tries)
        where = f"{self.where}: {what}"
        data = parse_value(bytes(body), where, "the answer")
        return _listing_of(data, where)

    def refusal(self, exc: BaseException, what: str) -> QKEnergyError | None:
        """The Hub's refusal of a request (an error of huggingface_hub's ``hf_raise_for_status``) as one line.

        Parameters
        ----------
        exc : BaseException
            What the request raised.
        what : str
            What was asked for, for the message ("its file list", a file).

        Returns
        -------
        QKEnergyError or None
            None for an exception that is not a refusal (a bug: raised as it is).
        """
        from huggingface_hub.errors import (
            GatedRepoError,
            HfHubHTTPError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )

        login = "log in with HF_TOKEN or hf auth login"
        if isinstance(exc, GatedRepoError):
            return QKEnergyError(
                f"{self.where}: a gated repository on {hub_endpoint()}; accept its conditions on the Hub "
                f"and {login}"
            )
        if isinstance(exc, RevisionNotFoundError):
            return QKEnergyError(
                f"{self.repo_id}: the Hub has no revision {show_name(self.reference.revision or 'main')}"
            )
        if isinstance(exc, RepositoryNotFoundError):
            return QKEnergyError(
                f"{self.where}: no such repository on {hub_endpoint()}, or a private one this token "
                f"cannot read ({login}); not a local path either"
            )
        if isinstance(exc, HfHubHTTPError):
            status = getattr(getattr(exc, "response", None), "status_code", None)
            hint = f" ({login})" if status in (401, 403) else ""
            return QKEnergyError(f"{self.where}: the Hub answered HTTP {status} for {what}{hint}")
        return None

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
                    + _listing(
                        " (its weight files: ",
                        [p for p in self.files if p.endswith((".safetensors", ".gguf"))],
                        ")",
                    )
                )
            return ("gguf" if chosen.endswith(".gguf") else "safetensors"), [chosen]
        if "model.safetensors" in self.files:
            return "safetensors", ["model.safetensors"]
        if INDEX_NAME in self.files:
            return "index", [INDEX_NAME]
        shards = sorted(p for p in self.files if "/" not in p and p.endswith(".safetensors"))
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
                local = self._local_copy(remote)
                if local is not None:
                    fetch = _local_fetch(local, f"{self.where}: {remote.path}")
                else:
                    fetch = None if self.offline else self._range_fetch(remote)
                relative = f"models/{self.repo_id}/snapshots/{self.commit}/{path}"
                mirror = self.cache.file(relative, remote.size, remote.etag, fetch)
                mirror.on_bytes = self._copied if local is not None else self._counted
                self._mirrors[path] = mirror
                self.record["files"][path] = {"size": remote.size, "etag": remote.etag}
        return mirror

    def _local_copy(self, remote: _RemoteFile) -> Path | None:
        """The Hugging Face cache's copy of a file of this commit, if whole: its blob is named by the
        listed ETag and has the listed size (what ``hf_hub_download`` leaves); else None."""
        if self.local is None:
            return None
        try:
            real = (self.local / remote.path).resolve(strict=True)
            blobs = (self.local.parent.parent / "blobs").resolve()
            whole = real.is_file() and real.stat().st_size == remote.size
        except (OSError, RuntimeError):
            return None
        return real if whole and real.is_relative_to(blobs) and real.name == remote.etag else None

    def fetch_headers(self, paths: list[str]) -> None:
        """Fetch the headers of these safetensors files at once, a few requests in flight.

        Each file's first :data:`~qkenergy.weights.safetensors_io.HEADER_PROBE` bytes, then the
        rest of its header where the length it starts with says so and its first bytes are JSON:
        what opening the shards would fetch one after the other (on the Hub a request costs its
        latency, a checkpoint has up to a few hundred shards). The headers are checked when the
        files are opened.

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
                self._json_header(mirror, path)
                mirror.ensure(8, 8 + length)

        with ThreadPoolExecutor(_HEADER_REQUESTS, thread_name_prefix="qkenergy-headers") as pool:
            for done in [pool.submit(header, path) for path in paths]:
                done.result()

    def _json_header(self, mirror: MirroredFile, path: str) -> None:
        """Refuse a safetensors header whose first bytes (in the first read) are not a JSON object's."""
        mirror.ensure(0, HEADER_PROBE)
        with open(mirror.path, "rb") as fh:
            fh.seek(8)
            start = fh.read(min(HEADER_PROBE, mirror.size) - 8).lstrip(b" \t\r\n")
        if start and not start.startswith(b"{"):
            raise QKEnergyError(
                f"{self.where}: {show_name(path)}: its header does not start as a JSON object (byte "
                f"{start[0]:#04x} where '{{' belongs); not a safetensors file, the rest of it was not fetched"
            )

    @contextlib.contextmanager
    def reading_headers(self) -> Iterator[None]:
        """While GGUF headers are read: a fetch past :data:`GGUF_HEADER_LIMIT` bytes is refused."""
        with self._lock:
            self._header_phase += 1
        try:
            yield
        finally:
            with self._lock:
                self._header_phase -= 1

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
        path = local.relative_to(self.root).as_posix()
        mirror = self.mirror(path)

        def fetch(begin: int, end: int) -> None:
            if path.endswith(".safetensors") and begin == 8 and end > HEADER_PROBE:
                self._json_header(mirror, path)  # the rest of the header only if it starts as JSON
            if path.endswith(".gguf") and self._header_phase and end > GGUF_HEADER_LIMIT:
                raise QKEnergyError(
                    f"{self.where}: {show_name(path)}: its GGUF header runs past its first "
                    f"{byte_text(GGUF_HEADER_LIMIT)}, more than any model's metadata and tensor table; "
                    "corrupt, or not a GGUF file (nothing more was fetched)"
                )
            mirror.ensure(begin, end)

        return fetch

    def _copied(self, n: int) -> None:
        with self._lock:  # copied from the Hugging Face cache: in the range cache, not fetched
            self.record["cache_bytes"] += n

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
            if mirror.on_bytes != self._copied:  # copied from the Hugging Face cache: nothing to fetch
                total += sum(b - a for a, b in mirror.missing(begin, end))
        return total

    def close(self) -> None:
        """Close the mirror's record."""
        self.cache.close()

    # ------------------------------------------------------------------ HTTP

    @contextlib.contextmanager
    def _get(self, url: str, headers: dict[str, str], what: str) -> Iterator[Any]:
        """One GET through huggingface_hub's session, bounded in time; the answer if 2xx or 3xx.

        Raises _Transient for what may pass (a lost connection, 408, 429, 5xx), QKEnergyError for
        the rest (a refusal by status, a timeout, a redirect loop), while the body is read too.
        """
        import httpx2
        from huggingface_hub.utils import build_hf_headers, get_session  # type: ignore[attr-defined]  # exported lazily

        bound = self.bounds.timeout
        asked = {**build_hf_headers(), "Accept-Encoding": "identity", **headers}
        # a mirror's user and password go as Basic auth, never in the URL that gets logged
        parts = urlsplit(url)
        auth: Any = httpx2.USE_CLIENT_DEFAULT
        if "@" in parts.netloc:
            auth = httpx2.BasicAuth(unquote(parts.username or ""), unquote(parts.password or ""))
            url = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]))
        timeout = httpx2.Timeout(bound)
        try:
            with get_session().stream("GET", url, headers=asked, timeout=timeout, auth=auth) as r:
                if r.status_code in _RETRY_STATUSES:
                    raise _Transient(f"HTTP {r.status_code}", r.status_code, _retry_after(r.headers))
                if r.status_code >= 400:
                    raise self._status_error(r, what)
                yield r
        except httpx2.TimeoutException as exc:
            raise QKEnergyError(
                f"{self.where}: {what}: no answer from {_host(exc)} within {bound:g} s "
                f"({BOUND_VARIABLES['timeout']} sets the bound); what was fetched is kept, run again to resume"
            ) from None
        except httpx2.TooManyRedirects:
            raise QKEnergyError(
                f"{self.where}: {what}: the server redirected the request more than "
                f"{get_session().max_redirects} times (a redirect loop); nothing was kept"
            ) from None
        except httpx2.HTTPError as exc:
            if not _is_transport(exc):
                raise QKEnergyError(
                    f"{self.where}: {what}: the answer cannot be read ({type(exc).__name__}); nothing was kept"
                ) from None
            raise _Transient(f"{type(exc).__name__} from {_host(exc)}") from None
        except OSError as exc:  # the connection refused or reset below httpx2
            raise _Transient(type(exc).__name__) from None

    def _status_error(self, r: Any, what: str) -> QKEnergyError:
        """An error status as one line, through huggingface_hub's typed errors (the body read bounded)."""
        import httpx2
        from huggingface_hub.utils import hf_raise_for_status  # type: ignore[attr-defined]  # exported lazily

        body = bytearray()
        with contextlib.suppress(httpx2.HTTPError, OSError):
            for chunk in r.iter_raw():
                body += chunk
                if len(body) >= _ERROR_BODY:
                    break
        answer = httpx2.Response(
            r.status_code, headers=r.headers, content=bytes(body[:_ERROR_BODY]), request=r.request
        )
        try:
            hf_raise_for_status(answer)
        except Exception as exc:  # every error it raises is mapped to a line
            refusal = self.refusal(exc, what)
            if refusal is not None:
                return refusal
        return QKEnergyError(f"{self.where}: the Hub answered HTTP {r.status_code} for {what}")

    def _retry(self, transient: _Transient, what: str, tries: int, lost: str = "") -> float:
        """Sleep before the next try (the server's Retry-After, at most QKENERGY_HUB_MAX_WAIT, else a
        backoff) and return the wait; after the last try, the error (``lost``: a connection lost mid-answer)."""
        if tries >= _TRIES and transient.status is not None:
            busy = " (too many requests)" if transient.status == 429 else ""
            raise QKEnergyError(
                f"{self.where}: the Hub answered HTTP {transient.status}{busy} for {what} ({_TRIES} tries); "
                "try again later"
            ) from None
        if tries >= _TRIES:
            raise QKEnergyError(
                lost
                or f"{self.where}: {what}: the connection failed {_TRIES} times ({transient.cause}); check the "
                "network and HF_ENDPOINT, or set HF_HUB_OFFLINE=1 to read what the hub range cache holds"
            ) from None
        wait = transient.retry_after
        if wait is not None and wait > self.bounds.max_wait:
            raise QKEnergyError(
                f"{self.where}: {what}: the Hub answered HTTP {transient.status} and asked to wait "
                f"{wait:g} s before retrying, more than {BOUND_VARIABLES['max_wait']}={self.bounds.max_wait:g} s; "
                "try again later"
            )
        wait = _BACKOFF * 2 ** (tries - 1) if wait is None else wait
        _log.debug(
            "%s: %s: %s; try %d of %d in %g s", self.where, what, transient.cause, tries + 1, _TRIES, wait
        )
        _sleep(wait)
        return wait

    def _check_rate(self, received: int, elapsed: float, what: str) -> None:
        """A transfer slower than QKENERGY_HUB_MIN_RATE (after the first QKENERGY_HUB_TIMEOUT seconds) ends the run."""
        bounds = self.bounds
        if elapsed > bounds.timeout and received < bounds.min_rate * (elapsed - bounds.timeout):
            raise QKEnergyError(
                f"{self.where}: {what}: {received} bytes arrived in {elapsed:.3g} s, slower than "
                f"{BOUND_VARIABLES['min_rate']}={bounds.min_rate:g} bytes/s; what was fetched before is kept, run again to resume"
            )

    def _answered(self, r: Any, remote: _RemoteFile, at: int, end: int) -> int:
        """Check an answer to ``Range: bytes=at-(end-1)`` before its body is read; the end of the bytes it holds.

        The status, an unencoded single-part body, the ``Content-Range`` against the request and the
        listed size, the ``Content-Length`` against it, the ETag and commit against the listing.
        """
        where, asked = f"{self.where}: {remote.path}", f"{at}-{end - 1}"

        def refused(problem: str) -> QKEnergyError:
            return QKEnergyError(f"{where}: {problem}; nothing was kept")

        encoding = r.headers.get("Content-Encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            raise refused(
                f"the server answered bytes {asked} with a {show_name(encoding, 30)}-encoded body "
                "(none was accepted)"
            )
        kind = r.headers.get("Content-Type", "")
        if kind.lower().startswith("multipart/"):
            raise refused(
                f"the server answered bytes {asked} with a {show_name(kind, 60)} body (one range was asked for)"
            )
        self._same_file(r, remote)
        length = r.headers.get("Content-Length")
        if r.status_code == 200 and at == 0 and end == remote.size:
            if length is not None and length.strip() != str(remote.size):
                raise refused(
                    f"the server sends {show_name(length, 30)} bytes for the whole file; its listing "
                    f"says {remote.size}"
                )
            return remote.size
        if r.status_code != 206:
            raise refused(
                f"the server answered HTTP {r.status_code} to a request for bytes {asked} "
                "(expected 206 Partial Content)"
            )
        found = _CONTENT_RANGE.fullmatch(r.headers.get("Content-Range", "").strip())
        if found is None:
            shown = show_name(r.headers.get("Content-Range", "(none)"), 60)
            raise refused(f"the server answered bytes {asked} with the Content-Range {shown}")
        first, last, total = int(found[1]), int(found[2]), found[3]
        if total != "*" and int(total) != remote.size:
            raise refused(f"the server says the file has {total} bytes; its listing says {remote.size}")
        if first != at or last < first or last >= end:
            raise refused(f"the server answered bytes {first}-{last} for a request of {asked}")
        if length is not None and length.strip() != str(last - first + 1):
            raise refused(
                f"the server's Content-Length {show_name(length, 30)} contradicts its Content-Range {first}-{last}"
            )
        return last + 1

    def _same_file(self, r: Any, remote: _RemoteFile) -> None:
        """The Hub's own answer (the one with ``X-Repo-Commit``, before any redirect to a CDN) names the
        listed file: its ETag (``X-Linked-Etag``, else ``ETag``, as huggingface_hub reads them), its commit."""
        hub = next((h for h in [*r.history, r] if "X-Repo-Commit" in h.headers), None)
        # no answer of the Hub's own: nothing to compare (docs/hub.md, what cannot be checked)
        if hub is None:
            return
        # without W/ and quotes, as huggingface_hub normalises it
        etag = (hub.headers.get("X-Linked-Etag") or hub.headers.get("ETag") or "").strip().removeprefix("W/")
        etag = etag.strip('"')
        if etag and remote.etag and etag != remote.etag:
            raise QKEnergyError(
                f"{self.where}: {remote.path}: the file changed on the server during the run: ETag "
                f"{show_name(etag, 70)}, listed {remote.etag}; nothing was kept, run again"
            )
        commit = hub.headers.get("X-Repo-Commit", "").strip()
        if commit and commit != self.commit:
            raise QKEnergyError(
                f"{self.where}: {remote.path}: the server answered from commit {show_name(commit, 50)}, not "
                f"the commit read ({self.commit}); nothing was kept"
            )

    def _range_fetch(self, remote: _RemoteFile) -> Any:
        from huggingface_hub import hf_hub_url

        url = hf_hub_url(self.repo_id, remote.path, revision=self.commit)
        what = f"{remote.path} (a byte-range request)"

        def fetch(begin: int, end: int) -> Iterator[bytes]:
            at, tries, waited, started = begin, 0, 0.0, time.monotonic()
            while at < end:
                try:
                    with self._get(url, {"Range": f"bytes={at}-{end - 1}"}, what) as r:
                        stop = self._answered(r, remote, at, end)
                        for chunk in r.iter_raw():
                            chunk = chunk[: stop - at]
                            if chunk:
                                at += len(chunk)
                                yield chunk
                            self._check_rate(at - begin, time.monotonic() - started - waited, what)
                            if at >= stop:
                                break
                        if at < stop:
                            raise _Transient("the answer ended early")
                    # a short but honest 206 (at == stop < end): the next request goes on from there
                except _Transient as transient:
                    tries += 1
                    lost = (
                        f"{self.where}: {remote.path}: the connection was lost after {at - begin} of the "
                        f"{end - begin} bytes at [{begin}, {end}) ({_TRIES} tries; {transient.cause}); what "
                        "was fetched is kept, run again to resume"
                    )
                    waited += self._retry(transient, remote.path, tries, lost)

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


def _host(exc: BaseException) -> str:
    """The host a failed request went to (a redirect may have led elsewhere than the endpoint)."""
    try:
        url = exc.request.url  # type: ignore[attr-defined]
        return f"{url.host}:{url.port}" if url.port else str(url.host)
    except (AttributeError, RuntimeError):
        return "the server"


def _retry_after(headers: Any) -> float | None:
    """``Retry-After`` in seconds (a number, or an HTTP date), None when absent or unreadable."""
    value = str(headers.get("Retry-After", "")).strip()
    if not value:
        return None
    if re.fullmatch(r"\d{1,12}(\.\d{1,6})?", value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _local_fetch(path: Path, where: str) -> Any:
    """A ``fetch`` reading a file of the Hugging Face cache (its bytes copied into the mirror)."""

    def fetch(begin: int, end: int) -> Iterator[bytes]:
        try:
            with open(path, "rb") as fh:
                fh.seek(begin)
                at = begin
                while at < end:
                    chunk = fh.read(min(1 << 20, end - at))
                    if not chunk:
                        raise QKEnergyError(
                            f"{where}: the Hugging Face cache's copy ({show_path(path)}) shrank while read"
                        )
                    at += len(chunk)
                    yield chunk
        except OSError as exc:
            raise QKEnergyError(
                f"{where}: cannot read the Hugging Face cache's copy ({show_path(path)}: "
                f"{exc.strerror or type(exc).__name__})"
            ) from None

    return fetch


def _listing(before: str, names: list[str], after: str, most: int = 8) -> str:
    if not names:
        return ""
    shown = ", ".join(names[:most]) + (f", ... ({len(names)} in all)" if len(names) > most else "")
    return f"{before}{shown}{after}"


def _listing_of(data: Any, where: str) -> tuple[str, dict[str, _RemoteFile]]:
    """The commit and files of the Hub's ``model_info`` answer (``blobs=true``), each field checked.

    ``sha`` 40 hexadecimal digits; ``siblings`` a list of objects with ``rfilename`` a path inside
    the repository (once each), ``size`` a non-negative integer, the ETag from ``lfs.sha256`` or
    ``blobId`` (hexadecimal text).
    """
    if not isinstance(data, dict):
        raise QKEnergyError(f"{where}: expected a JSON object, got {type(data).__name__}")
    commit = data.get("sha")
    if not isinstance(commit, str) or not _COMMIT.fullmatch(commit):
        raise QKEnergyError(
            f"{where}: the commit is {show_name(str(commit), 60)}; expected 40 hexadecimal digits"
        )
    siblings = data.get("siblings")
    if not isinstance(siblings, list):
        raise QKEnergyError(f'{where}: "siblings" is {type(siblings).__name__}; expected a list of files')
    rows = []
    for sibling in siblings:
        if isinstance(sibling, dict):  # anything else: _files_of refuses it
            lfs = sibling.get("lfs")
            etag = (lfs.get("sha256") if isinstance(lfs, dict) else None) or sibling.get("blobId")
            sibling = {"path": sibling.get("rfilename"), "size": sibling.get("size"), "etag": etag}
        rows.append(sibling)
    return commit, _files_of(rows, where)


def _files_of(rows: Any, where: str) -> dict[str, _RemoteFile]:
    """The files of a listing (``path``, ``size``, ``etag`` rows), live or stored, each field checked."""
    if not isinstance(rows, list):
        raise QKEnergyError(f"{where}: expected a list of files, got {type(rows).__name__}")
    files: dict[str, _RemoteFile] = {}
    for k, row in enumerate(rows):
        if not isinstance(row, dict):
            raise QKEnergyError(f"{where}: file {k} is {type(row).__name__}; expected an object")
        path, size, etag = row.get("path"), row.get("size"), row.get("etag")
        if not isinstance(path, str):
            raise QKEnergyError(f"{where}: file {k} has no path")
        if not plain_path(path):  # relative, no empty, `.` or `..` part, no backslash or NUL
            raise QKEnergyError(
                f"{where}: lists the file {show_name(path, 100)}, which is not a path inside the repository"
            )
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:  # a string of digits is no size
            raise QKEnergyError(
                f"{where}: {show_name(path)} has size {describe(size)}; expected a non-negative integer"
            )
        if not isinstance(etag, str) or not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", etag):
            raise QKEnergyError(
                f"{where}: {show_name(path)} has ETag {describe(etag)}; expected a git blob id or SHA-256"
            )
        if path in files:
            raise QKEnergyError(f"{where}: lists {show_name(path)} twice")
        files[path] = _RemoteFile(path, size, etag)
    return files


def _write_atomic(path: Path, text: str) -> None:
    """Write a small cache file whole or not at all (base.atomic), so that a reader never sees half of it.

    The name itself is replaced, never written through a link: the cache stays inside its folder.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path, replace_any=True) as temporary:
            temporary.write_text(text)
    except (OutputError, OSError) as exc:
        reason = exc.reason if isinstance(exc, OutputError) else exc.strerror or type(exc).__name__
        raise QKEnergyError(f"{show_path(path)}: cannot write to the hub range cache ({reason})") from None
