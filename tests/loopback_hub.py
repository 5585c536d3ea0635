"""A loopback Hugging Face Hub: an HTTP server on 127.0.0.1 serving repositories from local folders.

It answers the requests huggingface_hub 2.4.0 makes (read from its source: ``hf_api.py``,
``file_download.py``, ``hf_file_system.py``, ``utils/_http.py``), so that code reading the Hub through
that library (``HfApi``, ``hf_hub_download``, ``HfFileSystem``) can be tested without the network:

* ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}``: model info (``sha`` the
  commit, ``siblings``; with ``?blobs=true`` their ``size``, ``blobId`` and ``lfs``; ``?expand=``
  keeps the properties asked for).
* ``GET /api/models/{repo}/tree/{rev}[/{path}]``: the listing (``recursive``, ``expand`` adds
  ``lastCommit``), paginated as the Hub does (1000 entries a page, 50 with ``expand``; cursor in a
  ``Link: <...>; rel="next"`` header).
* ``POST /api/models/{repo}/paths-info/{rev}`` (form fields ``paths``, ``expand``).
* ``GET /api/models/{repo}/refs`` (branches, tags, ``include_prs``).
* ``HEAD`` / ``GET /{repo}/resolve/{rev}/{path}``. A small file answers 200 with ``ETag`` its git
  blob id, ``X-Repo-Commit``, ``Content-Length``, ``Accept-Ranges: bytes``. An LFS file (``*.safetensors``,
  ``*.gguf``, ``*.bin``, ``*.pt``, anything of 1 MiB or more) answers as the Hub does: ``302`` to a
  second listener on another port of 127.0.0.1 standing for the CDN, with ``X-Repo-Commit``,
  ``X-Linked-Etag`` (its SHA-256) and ``X-Linked-Size``. The CDN is another origin, so
  huggingface_hub does not follow the redirect on ``HEAD`` (it reads the metadata off the 302) and
  drops the ``Authorization`` header when it follows it on ``GET``, as against the real CDN.
  ``LoopbackHub(redirect_lfs=False)`` serves LFS files directly (200, ``ETag`` the SHA-256).
* ``Range: bytes=a-b`` / ``a-`` / ``-n``: ``206`` with ``Content-Range``; past the end ``416`` with
  ``Content-Range: bytes */size``; several ranges: ``400`` (not needed by the readers).

No Xet header is ever sent, so huggingface_hub downloads over plain HTTP.

Errors carry the ``X-Error-Code`` / ``X-Error-Message`` headers that ``hf_raise_for_status`` maps to
its exception classes (on ``HEAD`` too, where there is no body):

====================================================  ======  =====================  =========================
case                                                  status  X-Error-Code           raised by huggingface_hub
====================================================  ======  =====================  =========================
token not known to the hub (any repo)                 401     (none)                 ``HfHubHTTPError``
unknown or private repo, no token                     401     RepoNotFound           ``RepositoryNotFoundError``
unknown or private repo, a valid token not granted    404     RepoNotFound           ``RepositoryNotFoundError``
gated repo, a file, no token                          401     GatedRepo              ``GatedRepoError``
gated repo, a file, a valid token not granted         403     GatedRepo              ``GatedRepoError``
unknown revision                                      404     RevisionNotFound       ``RevisionNotFoundError``
unknown file / tree path                              404     EntryNotFound          ``RemoteEntryNotFoundError``
====================================================  ======  =====================  =========================

As on the Hub, a gated repo's info, listing and refs are public; only its files are gated; the
missing repo and the private one are told apart only to a valid token. ``hub.token`` is valid and
granted on every private or gated repo (unless ``add_repo(grant=...)`` says otherwise);
``hub.other_token`` is valid and granted nowhere. Send them as ``Authorization: Bearer TOKEN``.

ETags. A small file's ETag is its git blob id (SHA-1 of ``"blob {size}\\0"`` + content), an LFS
file's the SHA-256 of its content, as on the Hub. A file over ``HUGE_FILE`` (256 MiB; the sparse
files of the benchmarks, hundreds of GB of holes) is never read whole: its stand-in "SHA-256" is
the SHA-256 of ``b"loopback-hub-standin\\0" + name + b"\\0" + str(size) + b"\\0"`` + its first MiB.
Stable for an unchanged file, different for another name, size or header, but not the hash of the
content: huggingface_hub only checks it against the content in ``hf_hub_download(local_dir=...)``
of a file already there. Bodies are sent in 1 MiB chunks read with ``os.pread``. A repository's
files are read from its folder at each request and hashed once at ``add_repo``: the folder must
not change afterwards (add another revision instead).

Commits are ``sha1`` over the repo id and the sorted (path, blob id) of the files: the same folder
gives the same commit, every run. A revision is a branch, a tag or a full 40-digit commit id
(branches win over tags, as git resolves them); anything else is ``RevisionNotFound``.

HfFileSystem reads (huggingface_hub 2.4.0, fsspec 2026.9): ``fs.open(path, "rb")`` buffers with
fsspec's ``readahead`` cache and a 5 MiB block, so ``f.seek(a); f.read(n)`` fetches
``Range: bytes=a-(a+n+5 MiB-1)`` (capped at the size). Exact reads need the ``none`` cache:
``fs.open(path, "rb", cache_type="none")`` (any ``block_size`` but 0; 0 selects the streaming
file, which cannot seek) -- then each ``read(n)`` is one GET of exactly ``bytes=a-(a+n-1)``.
``read()`` with no length at offset 0 streams the whole file; at another offset it reads to the
end. ``fs.cat_file(path, start, end, cache_type="none")`` does the same in one call. Pass
``size=`` to ``open`` to skip the listing ``info`` would make (``open`` calls ``fs.info``, which
lists the parent folder once per instance). Each GET goes to
``/{repo}/resolve/{revision as given}/{path}``: to pin a read to a commit, open
``org/name@{commit}/path``.

What huggingface_hub 2.4.0 does against it (each checked in tests/weights/test_loopback_hub.py):

* Requests: ``model_info(revision=r)`` is ``GET /api/models/{repo}/revision/{r}`` and its ``sha`` is
  the commit; ``snapshot_download`` resolves the commit that way first and then asks for
  everything by commit. ``hf_hub_download`` and ``get_hf_file_metadata`` make a ``HEAD`` of
  ``resolve`` on every call (with a 40-digit commit id as revision and the file cached:
  no request at all). ``HfFileSystem`` never makes a ``HEAD``: ``resolve_path`` calls
  ``model_info`` once per (repo, revision) and instance, ``info``/``open`` list the parent folder
  (``tree``, not recursive) and ``open`` then GETs ``resolve`` with a Range (302 + CDN 206).
* The listing carries the ETags: an LFS entry's ``lfs.sha256`` and a small file's ``blob_id`` are
  what the ``HEAD`` would give as ETag, so ``HfFileSystem.ls`` / ``info`` / ``list_repo_tree``
  give (size, ETag) of every file with no ``HEAD``.
* ``HfFileSystem()`` returns one cached instance per (thread, endpoint, token), and the instance
  caches listings and repo checks: after a branch moves it still gives the old sizes while reads
  of ``@main`` get the new bytes. Resolve the commit once and read ``org/name@commit/path``;
  ``fs.invalidate_cache()`` or ``info(..., refresh=True)`` refresh it. Another thread gets another
  instance, seeded with a copy of the main thread's caches.
* HfFileSystem turns RepositoryNotFound and RevisionNotFound into ``FileNotFoundError`` (the hub
  error as ``__cause__``, "repository not found" / "revision not found" in the message); a gated
  repo lists fine and its reads raise ``GatedRepoError``.
* Retries (``http_backoff``): 408, 429, 500, 502, 503, 504 and dropped / refused connections are
  retried 5 times after 1, 2, 4, 8, 8 s by ``_fetch_range``, the pages of ``list_repo_tree`` and
  ``hf_hub_download``'s HEAD (when nothing is cached); ``hf_hub_download``'s GET retries dropped
  connections 5 times, 1 s apart, and 5xx not at all. ``model_info``, ``get_paths_info`` and
  ``get_hf_file_metadata`` do not retry. A test failing a repo for good waits 23 s unless it
  patches the sleep (see ``no_sleep`` in the tests).
* ``hf_hub_download`` resumes a cut body only from whole 10 MiB chunks
  (``constants.DOWNLOAD_CHUNK_SIZE``: httpx2 yields nothing before a full chunk): a file cut
  within its first 10 MiB is fetched again from byte 0. ``_fetch_range`` asks the whole range again.
* Offline: huggingface_hub reads ``HF_HUB_OFFLINE`` at import; requests are refused by
  ``constants.HF_HUB_OFFLINE`` (patch it, not only the variable).
* 401 without an ``X-Error-Code`` becomes ``RepositoryNotFoundError`` only for ``https://`` URLs
  (``REPO_API_REGEX``): over ``http://127.0.0.1`` the hub must say ``RepoNotFound``, which it does.
* Not served: ``list_repo_commits`` (so ``HfFileSystem.info`` of a repo root with
  ``expand_info=True``), datasets and spaces, Xet, uploads.

Fault injection: ``hub.cut(repo, path, after_bytes, times=1)`` sends the headers of the next
``times`` GETs of that file and ``after_bytes`` bytes of their body, then drops the connection;
``hub.fail(repo, status, times=1)`` answers the next ``times`` requests naming that repo (API,
resolve and CDN) with ``status``; ``hub.inject(repo, kind, path=..., times=1, **options)`` answers
as a lying, broken or stalled server would (a file list that is HTML or garbage, a Content-Range
that is not the range asked, multipart and falsely encoded bodies, another ETag, redirect loops,
429 with Retry-After, stalls, trickles, short pieces: see :meth:`LoopbackHub.inject`). A stalled
answer ends when the hub stops.

Accounting (all under a lock, readable from the test thread): ``hub.bytes_served`` (body bytes of
file GETs, resolve and CDN), ``hub.served[(repo, path)]`` (the same per file),
``hub.file_gets[(repo, path)]`` (GETs of that file, each redirect's two legs counted once: the
leg that sends the body), ``hub.log`` (one :class:`Request` per request: method, path, Range
header, status, listener, whether it was authorized), ``hub.reset_counts()``.

Use in tests: the ``loopback_hub`` fixture (``tests/conftest.py``) starts it with the
environment and huggingface_hub's constants pointed at it (:func:`hub_environment`); in
benchmarks: ``with serve_hub(tmp_dir) as hub: ...`` (same set-up, as a context manager).
While either is active a socket may connect only to 127.0.0.1 (or a Unix socket): anything else
raises ``ConnectionRefusedError`` and is listed in ``hub.foreign_connections``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import sys
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = ["HUGE_FILE", "LoopbackHub", "Request", "hub_environment", "serve_hub"]

HUGE_FILE = 256 * 2**20  # above this, the ETag is a stand-in (see the module docstring)
LFS_SIZE = 2**20  # files this large (or with an LFS suffix) are LFS files
LFS_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx")
CHUNK = 2**20
DATE = "2026-01-01T00:00:00.000Z"  # every commit's date: the listings are reproducible


@dataclass(frozen=True)
class Request:
    """One request as the hub saw it."""

    method: str
    path: str  # the URL path and query, as sent
    range: str | None  # the Range header
    status: int
    listener: str  # "hub" or "cdn"
    authorized: bool  # an Authorization header was sent


@dataclass(frozen=True)
class _File:
    path: str  # in the repo, '/'-separated
    local: Path
    size: int
    blob_id: str  # git blob id of what git stores (the pointer, for an LFS file)
    sha256: str | None  # LFS files only
    pointer_size: int

    @property
    def etag(self) -> str:
        return self.sha256 if self.sha256 is not None else self.blob_id


@dataclass
class _Repo:
    repo_id: str
    private: bool
    gated: bool
    grant: set[str]
    commits: dict[str, dict[str, _File]] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)


@dataclass
class _Fault:
    repo_id: str
    path: str | None
    kind: str
    left: list[int]  # answers still to spoil
    options: dict[str, Any]  # the kind's options; "after": matching requests let through first


# the faults of each step: the file list, the hub's resolve answer, the answer that sends a file's bytes
_LISTING_FAULTS = ("listing", "status", "stall")
_RESOLVE_FAULTS = ("etag", "redirect", "status", "stall")
_BODY_FAULTS = ("shift", "from_zero", "multipart", "gzip", "total", "short", "trickle", "hang")


class _HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, commit: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.commit = status, message, code, commit


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _sha256(local: Path, name: str, size: int) -> str:
    digest = hashlib.sha256()
    if size > HUGE_FILE:
        digest.update(b"loopback-hub-standin\0" + name.encode() + b"\0" + str(size).encode() + b"\0")
        with open(local, "rb") as fh:
            digest.update(fh.read(CHUNK))
        return digest.hexdigest()
    with open(local, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _scan(folder: Path) -> dict[str, _File]:
    files: dict[str, _File] = {}
    for local in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = local.relative_to(folder).as_posix()
        size = local.stat().st_size
        if size >= LFS_SIZE or local.suffix.lower() in LFS_SUFFIXES:
            sha = _sha256(local, name, size)
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {size}\n".encode()
            files[name] = _File(name, local, size, _git_blob_id(pointer), sha, len(pointer))
        else:
            files[name] = _File(name, local, size, _git_blob_id(local.read_bytes()), None, 0)
    return files


def _tree_id(prefix: str, files: Iterable[_File]) -> str:
    digest = hashlib.sha1(prefix.encode())
    for f in files:
        if f.path.startswith(prefix + "/"):
            digest.update(f"{f.path}\0{f.blob_id}\n".encode())
    return digest.hexdigest()


def _parse_range(header: str, size: int) -> tuple[int, int] | None:
    """(start, stop) of ``bytes=a-b`` / ``a-`` / ``-n``; None when not satisfiable; ValueError if malformed."""
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        raise ValueError(header)
    first, _, last = spec.strip().partition("-")
    if not first:
        n = int(last)
        return (max(size - n, 0), size) if n > 0 and size > 0 else None
    start = int(first)
    stop = min(int(last) + 1, size) if last else size
    if start >= size or stop <= start:
        return None
    return start, stop


class LoopbackHub:
    """A Hub answering on 127.0.0.1 (see the module docstring).

    Parameters
    ----------
    redirect_lfs : bool
        LFS files answer 302 to the CDN listener, as on the Hub (default); False serves them
        directly.
    page_size, expand_page_size : int
        Tree entries per page, without and with ``expand`` (the Hub's 1000 and 50).
    """

    token = "hf_loopback_user"
    other_token = "hf_loopback_stranger"

    def __init__(
        self, *, redirect_lfs: bool = True, page_size: int = 1000, expand_page_size: int = 50
    ) -> None:
        self.redirect_lfs = redirect_lfs
        self.page_size, self.expand_page_size = page_size, expand_page_size
        self.repos: dict[str, _Repo] = {}
        self.lock = threading.Lock()
        self._cuts: dict[tuple[str, str], list[int]] = {}
        self._fails: dict[str, list[int]] = {}
        self._faults: list[_Fault] = []
        self.stopping = threading.Event()  # set by stop(): stalled answers end at once
        self.foreign_connections: list[Any] = []
        self.reset_counts()
        self._servers: list[_Server] = []
        self._threads: list[threading.Thread] = []
        self.url = self.cdn_url = ""

    # ------------------------------------------------------------------ life cycle

    def start(self) -> LoopbackHub:
        """Listen on two ports of 127.0.0.1 (the hub and its CDN), each served by a background thread."""
        self.stopping.clear()
        for listener in ("hub", "cdn"):
            server = _Server(("127.0.0.1", 0), _Handler)
            server.hub, server.listener = self, listener
            # a short poll: stop() waits for it
            thread = threading.Thread(
                target=server.serve_forever, args=(0.02,), name=f"loopback-{listener}", daemon=True
            )
            thread.start()
            self._servers.append(server)
            self._threads.append(thread)
        self.url = f"http://127.0.0.1:{self._servers[0].server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self._servers[1].server_address[1]}"
        return self

    def stop(self) -> None:
        """Stop listening and drop the open connections."""
        self.stopping.set()
        for server in self._servers:
            server.shutdown()
            server.drop_connections()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers, self._threads = [], []

    def __enter__(self) -> LoopbackHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ repositories

    def add_repo(
        self,
        repo_id: str,
        folder: str | os.PathLike[str],
        *,
        revision: str = "main",
        tags: Iterable[str] = (),
        private: bool | None = None,
        gated: bool | None = None,
        grant: Iterable[str] | None = None,
    ) -> str:
        """Serve ``folder`` as the branch ``revision`` of ``repo_id``; returns the commit id.

        Parameters
        ----------
        repo_id : str
            ``namespace/name``.
        folder : path
            Its files (sub-folders included) are the repo's; they are hashed now and read at each request.
        revision : str
            The branch that points to the new commit (created or moved).
        tags : iterable of str
            Tags pointing to the new commit.
        private, gated : bool or None
            Access of the repo (None: unchanged; False for a new repo).
        grant : iterable of str or None
            Tokens with access when private or gated (None: unchanged; ``{hub.token}`` for a new repo).

        Returns
        -------
        str
            The commit id (40 hex digits), deterministic in the repo id and the files.
        """
        if repo_id.count("/") != 1 or not all(repo_id.split("/")):
            raise ValueError(f"repo id {repo_id!r}: expected 'namespace/name'")
        files = _scan(Path(folder))
        digest = hashlib.sha1(repo_id.encode() + b"\0")
        for f in files.values():
            digest.update(f"{f.path}\0{f.blob_id}\n".encode())
        commit = digest.hexdigest()
        with self.lock:
            repo = self.repos.get(repo_id)
            if repo is None:
                repo = self.repos[repo_id] = _Repo(repo_id, False, False, {self.token})
            if private is not None:
                repo.private = private
            if gated is not None:
                repo.gated = gated
            if grant is not None:
                repo.grant = set(grant)
            repo.commits[commit] = files
            repo.branches[revision] = commit
            for tag in tags:
                repo.tags[tag] = commit
        return commit

    # ------------------------------------------------------------------ faults and counts

    def cut(self, repo_id: str, path: str, after_bytes: int, times: int = 1) -> None:
        """Drop the connection of the next ``times`` GETs of ``path`` after ``after_bytes`` body bytes."""
        with self.lock:
            self._cuts[(repo_id, path)] = [after_bytes, times]

    def fail(self, repo_id: str, status: int, times: int = 1) -> None:
        """Answer the next ``times`` requests naming ``repo_id`` with ``status``."""
        with self.lock:
            self._fails[repo_id] = [status, times]

    def inject(
        self, repo_id: str, kind: str, *, path: str | None = None, times: int = 1, **options: Any
    ) -> None:
        """Answer the next ``times`` matching requests of ``repo_id`` as a lying or broken server would.

        ``path`` None: the file list (``model_info``); else the requests for that file. Kinds (and
        their options), each at the step where a real server would do it:

        =================  =========================================================================
        kind               what the answer does
        =================  =========================================================================
        listing            the file list's body is ``body`` (bytes, str, or a value sent as JSON),
                           with ``content_type`` (default JSON)
        status             the status ``status`` with the headers ``headers`` (``Retry-After``...)
        stall              nothing sent for ``seconds`` (default 60, ended by stop()), then closed
        etag               the resolve answer's ETag and X-Linked-Etag are ``etag``
        redirect           302 to ``location`` (default: the same URL again, a loop)
        shift              206 with the honest Content-Range of the bytes ``by`` further on
        from_zero          206 of the bytes from 0, its Content-Range saying so
        multipart          206 with ``Content-Type: multipart/byteranges``
        gzip               ``Content-Encoding: gzip`` on a body that is not gzip
        total              the Content-Range's total is ``total``
        short              an honest 206 of at most ``piece`` bytes (a server that serves pieces)
        trickle            the body sent one byte every ``delay`` seconds (default 0.2)
        hang               ``sent`` bytes of the body (default half), then silence, the connection open
        =================  =========================================================================

        Every kind takes ``after=N``: the first N matching requests are answered honestly. The
        file faults from ``etag`` on apply to the leg that sends the body (``etag``, ``redirect``
        and ``status`` to the hub's resolve answer, before any redirect to the CDN).
        """
        with self.lock:
            self._faults.append(_Fault(repo_id, path, kind, [times], options))

    def clear_faults(self) -> None:
        """Forget every injected fault not yet taken: the server is honest from now on."""
        with self.lock:
            self._faults.clear()

    def _take_fault(self, repo_id: str, path: str | None, kinds: tuple[str, ...]) -> _Fault | None:
        with self.lock:
            for fault in self._faults:
                if fault.repo_id == repo_id and fault.path == path and fault.kind in kinds:
                    if fault.options.get("after", 0) > 0:
                        fault.options["after"] -= 1
                        return None
                    fault.left[0] -= 1
                    if fault.left[0] <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def reset_counts(self) -> None:
        """Zero bytes_served, served, file_gets and the log."""
        with self.lock:
            self.bytes_served = 0
            self.served: Counter[tuple[str, str]] = Counter()
            self.file_gets: Counter[tuple[str, str]] = Counter()
            self.log: list[Request] = []

    def _take_cut(self, key: tuple[str, str]) -> int | None:
        with self.lock:
            cut = self._cuts.get(key)
            if cut is None:
                return None
            cut[1] -= 1
            if cut[1] <= 0:
                del self._cuts[key]
            return cut[0]

    def _take_fail(self, repo_id: str) -> int | None:
        with self.lock:
            fail = self._fails.get(repo_id)
            if fail is None:
                return None
            fail[1] -= 1
            if fail[1] <= 0:
                del self._fails[repo_id]
            return fail[0]

    # ------------------------------------------------------------------ resolution

    def _repo(self, repo_id: str, token: str | None, *, files: bool) -> _Repo:
        if token is not None and token not in (self.token, self.other_token):
            raise _HubError(401, "Invalid credentials in Authorization header")
        repo = self.repos.get(repo_id)
        if repo is None or (repo.private and token not in repo.grant):
            # the Hub does not tell a private repo from a missing one, and says 401 to no token
            status = 401 if token is None else 404
            raise _HubError(status, "Repository not found", "RepoNotFound")
        if files and repo.gated and token not in repo.grant:
            if token is None:
                message = (
                    f"Access to model {repo_id} is restricted. You must have access to it and be "
                    "authenticated to access it. Please log in."
                )
                raise _HubError(401, message, "GatedRepo")
            message = f"Access to model {repo_id} is restricted and you are not in the authorized list."
            raise _HubError(403, message, "GatedRepo")
        return repo

    @staticmethod
    def _commit(repo: _Repo, revision: str) -> str:
        if revision in repo.branches:
            return repo.branches[revision]
        if revision in repo.tags:
            return repo.tags[revision]
        if revision in repo.commits:
            return revision
        raise _HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    hub: LoopbackHub
    listener: str

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that closed a connection (an answer refused before its body was read) is no error
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
            return
        super().handle_error(request, client_address)

    def drop_connections(self) -> None:
        with self.connections_lock:
            for sock in list(self.connections):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as huggingface_hub's pooled client expects
    server: _Server
    timeout = 30  # an idle kept-alive connection is closed after this
    disable_nagle_algorithm = True  # headers and body go in separate writes: no 40 ms wait for the ACK

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the hub's own log records requests

    # ------------------------------------------------------------------ plumbing

    @property
    def hub(self) -> LoopbackHub:
        return self.server.hub

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization")
        if auth is None:
            return None
        scheme, _, token = auth.partition(" ")
        # a user and password in the endpoint's URL (a private mirror) come as Basic: no Hub token
        return token.strip() if scheme.lower() == "bearer" else None if scheme.lower() == "basic" else auth

    def _record(self, status: int) -> None:
        with self.hub.lock:
            entry = Request(
                self.command,
                self.path,
                self.headers.get("Range"),
                status,
                self.server.listener,
                self.headers.get("Authorization") is not None,
            )
            self.hub.log.append(entry)

    def _send(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        # recorded before sending: once the client has the answer, the test sees it in the log
        self._record(status)
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, payload: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self._send(200, {"Content-Type": "application/json; charset=utf-8", **(headers or {})}, body)

    def _fault(self, repo_id: str, path: str | None, kinds: tuple[str, ...]) -> bool:
        """Answer with an injected fault of these kinds, if one is due; whether one was."""
        fault = self.hub._take_fault(repo_id, path, kinds)
        if fault is None:
            return False
        self._faulty(fault)
        return True

    def _faulty(self, fault: _Fault) -> None:
        """The answers of the listing and resolve faults (see LoopbackHub.inject)."""
        options = fault.options
        if fault.kind == "listing":
            body = options["body"]
            raw = (
                body
                if isinstance(body, bytes)
                else body.encode()
                if isinstance(body, str)
                else json.dumps(body).encode()
            )
            self._send(200, {"Content-Type": options.get("content_type", "application/json")}, raw)
        elif fault.kind == "status":
            self._send(options["status"], dict(options.get("headers", {})), b"loopback hub: injected status")
        elif fault.kind == "redirect":
            self._send(302, {"Location": options.get("location", self.hub.url + self.path)})
        elif fault.kind == "stall":
            self._record(0)
            self.hub.stopping.wait(options.get("seconds", 60))
            self.close_connection = True
        else:  # pragma: no cover - a kind of another step
            raise ValueError(fault.kind)

    def _error(self, error: _HubError) -> None:
        headers = {"Content-Type": "application/json; charset=utf-8", "X-Error-Message": error.message}
        if error.code is not None:
            headers["X-Error-Code"] = error.code
        if error.commit is not None:
            headers["X-Repo-Commit"] = error.commit
        self._send(error.status, headers, json.dumps({"error": error.message}).encode())

    def _dispatch(self) -> None:
        split = urlsplit(self.path)
        query = parse_qs(split.query)
        parts = split.path.strip("/").split("/")
        body = b""
        if self.command == "POST":
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            repo_id = self._repo_id_of(parts)
            if repo_id is not None and (status := self.hub._take_fail(repo_id)) is not None:
                raise _HubError(status, f"loopback hub: injected {status}")
            if self.server.listener == "cdn":
                self._cdn(parts)
            elif parts[:2] == ["api", "models"] and len(parts) >= 4:
                self._api(parts[2] + "/" + parts[3], parts[4:], query, body)
            elif len(parts) >= 5 and parts[2] == "resolve":
                self._resolve(parts[0] + "/" + parts[1], unquote(parts[3]), unquote("/".join(parts[4:])))
            else:
                raise _HubError(404, f"loopback hub: no route for {split.path}")
        except _HubError as error:
            self._error(error)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _repo_id_of(self, parts: list[str]) -> str | None:
        if self.server.listener == "cdn" and len(parts) >= 3:
            return parts[1] + "/" + parts[2]
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            return parts[2] + "/" + parts[3]
        if len(parts) >= 3 and parts[2] == "resolve":
            return parts[0] + "/" + parts[1]
        return None

    # ------------------------------------------------------------------ API

    def _api(self, repo_id: str, rest: list[str], query: dict[str, list[str]], body: bytes) -> None:
        repo = self.hub._repo(repo_id, self._token(), files=False)
        if (not rest or rest[0] == "revision") and self._fault(repo_id, None, _LISTING_FAULTS):
            return
        if not rest or rest[0] == "revision":
            revision = unquote(rest[1]) if len(rest) > 1 else "main"
            self._model_info(repo, self.hub._commit(repo, revision), query)
        elif rest[0] == "tree" and len(rest) >= 2:
            commit = self.hub._commit(repo, unquote(rest[1]))
            self._tree(repo, commit, unquote("/".join(rest[2:])), query)
        elif rest[0] == "paths-info" and len(rest) == 2 and self.command == "POST":
            commit = self.hub._commit(repo, unquote(rest[1]))
            form = parse_qs(body.decode())
            expand = form.get("expand", ["false"])[0].lower() == "true"
            entries = [self._entry(repo, commit, p.strip("/"), expand) for p in form.get("paths", [])]
            self._json([e for e in entries if e is not None])
        elif rest == ["refs"]:
            self._json(self._refs(repo, "include_prs" in query))
        else:
            raise _HubError(404, f"loopback hub: no API route {'/'.join(rest)}")

    def _refs(self, repo: _Repo, prs: bool) -> dict[str, Any]:
        def refs(kind: str, table: dict[str, str]) -> list[dict[str, str]]:
            return [
                {"name": n, "ref": f"refs/{kind}/{n}", "targetCommit": c} for n, c in sorted(table.items())
            ]

        out: dict[str, Any] = {
            "branches": refs("heads", repo.branches),
            "converts": [],
            "tags": refs("tags", repo.tags),
        }
        if prs:
            out["pullRequests"] = []
        return out

    def _model_info(self, repo: _Repo, commit: str, query: dict[str, list[str]]) -> None:
        files = repo.commits[commit]
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        for f in files.values():
            sibling: dict[str, Any] = {"rfilename": f.path}
            if blobs:
                sibling.update(size=f.size, blobId=f.blob_id)
                if f.sha256 is not None:
                    sibling["lfs"] = {"size": f.size, "sha256": f.sha256, "pointerSize": f.pointer_size}
            siblings.append(sibling)
        info: dict[str, Any] = {
            "_id": hashlib.sha1(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": commit,
            "lastModified": DATE,
            "createdAt": DATE,
            "private": repo.private,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": siblings,
            "usedStorage": sum(f.size for f in files.values()),
        }
        config = files.get("config.json")
        if config is not None and config.size < LFS_SIZE:
            with contextlib.suppress(ValueError, OSError):
                loaded = json.loads(config.local.read_text())
                if isinstance(loaded, dict):
                    info["config"] = {k: loaded[k] for k in ("architectures", "model_type") if k in loaded}
        expand = query.get("expand") or query.get("expand[]")
        if expand:
            info = {k: v for k, v in info.items() if k in ("_id", "id") or k in expand}
        self._json(info)

    def _entry(self, repo: _Repo, commit: str, path: str, expand: bool) -> dict[str, Any] | None:
        files = repo.commits[commit]
        f = files.get(path)
        entry: dict[str, Any]
        if f is not None:
            entry = {"type": "file", "oid": f.blob_id, "size": f.size, "path": f.path}
            if f.sha256 is not None:
                entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": f.pointer_size}
        elif any(name.startswith(path + "/") for name in files):
            entry = {"type": "directory", "oid": _tree_id(path, files.values()), "size": 0, "path": path}
        else:
            return None
        if expand:
            entry["lastCommit"] = {"id": commit, "title": f"loopback commit {commit[:7]}", "date": DATE}
        return entry

    def _tree(self, repo: _Repo, commit: str, path: str, query: dict[str, list[str]]) -> None:
        files = repo.commits[commit]
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        expand = query.get("expand", ["false"])[0].lower() == "true"
        prefix = path.strip("/")
        if prefix and not any(name.startswith(prefix + "/") for name in files):
            raise _HubError(404, f"Entry not found: {prefix}", "EntryNotFound", commit)
        names: set[str] = set()
        for name in files:
            if prefix and not name.startswith(prefix + "/"):
                continue
            rel = name[len(prefix) + 1 :] if prefix else name
            pieces = rel.split("/")
            base = prefix + "/" if prefix else ""
            depth = len(pieces) if recursive else 1
            for k in range(1, min(depth, len(pieces)) + 1):
                names.add(base + "/".join(pieces[:k]))
        # the Hub lists a folder's directories before its files ("tree first")
        ordered = sorted(names, key=lambda n: (n in files, n))
        size = self.hub.expand_page_size if expand else self.hub.page_size
        start = int(query.get("cursor", ["0"])[0])
        page = ordered[start : start + size]
        headers = {}
        if start + size < len(ordered):
            split = urlsplit(self.path)
            rest = {k: v for k, v in query.items() if k != "cursor"}
            params = "&".join(f"{k}={quote(v[0])}" for k, v in rest.items())
            link = f"{self.hub.url}{split.path}?{params}{'&' if params else ''}cursor={start + size}"
            headers["Link"] = f'<{link}>; rel="next"'
        entries = [self._entry(repo, commit, name, expand) for name in page]
        self._json([e for e in entries if e is not None], headers)

    # ------------------------------------------------------------------ files

    def _resolve(self, repo_id: str, revision: str, path: str) -> None:
        repo = self.hub._repo(repo_id, self._token(), files=True)
        commit = self.hub._commit(repo, revision)
        f = repo.commits[commit].get(path)
        if f is None:
            raise _HubError(404, "Entry not found", "EntryNotFound", commit)
        headers = {"X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
        fault = self.hub._take_fault(repo_id, path, _RESOLVE_FAULTS)
        if fault is not None and fault.kind != "etag":
            self._faulty(fault)
            return
        lie = f'"{fault.options["etag"]}"' if fault is not None else None  # another file under its name
        if f.sha256 is not None and self.hub.redirect_lfs:
            location = f"{self.hub.cdn_url}/lfs/{quote(repo_id)}/{commit}/{quote(path)}"
            headers.update(
                {
                    "Location": location,
                    "ETag": lie or f'"{f.blob_id}"',
                    "X-Linked-Etag": lie or f'"{f.sha256}"',
                    "X-Linked-Size": str(f.size),
                    "Content-Type": "text/plain; charset=utf-8",
                }
            )
            self._send(302, headers, f"Found. Redirecting to {location}".encode())
            return
        if f.sha256 is not None:
            headers["X-Linked-Size"] = str(f.size)
            headers["X-Linked-Etag"] = lie or f'"{f.sha256}"'
        headers["ETag"] = lie or f'"{f.etag}"'
        self._file(repo_id, f, headers)

    def _cdn(self, parts: list[str]) -> None:
        # /lfs/{namespace}/{name}/{commit}/{path}: reached only through a redirect, so access was checked
        if len(parts) < 5 or parts[0] != "lfs":
            raise _HubError(404, "loopback cdn: no such object")
        repo = self.hub.repos.get(parts[1] + "/" + parts[2])
        files = repo.commits.get(parts[3]) if repo is not None else None
        f = files.get(unquote("/".join(parts[4:]))) if files is not None else None
        if repo is None or f is None:
            raise _HubError(404, "loopback cdn: no such object")
        self._file(repo.repo_id, f, {"ETag": f'"{f.etag}"', "Accept-Ranges": "bytes"})

    def _file(self, repo_id: str, f: _File, headers: dict[str, str]) -> None:
        start, stop, status = 0, f.size, 200
        header = self.headers.get("Range")
        if header is not None:
            try:
                span = _parse_range(header, f.size)
            except ValueError:
                raise _HubError(400, f"loopback hub: unsupported Range {header!r}") from None
            if span is None:
                self._send(416, {**headers, "Content-Range": f"bytes */{f.size}"}, b"Range Not Satisfiable")
                return
            start, stop = span
            status = 206
        headers.setdefault("Content-Type", "application/octet-stream")
        key = (repo_id, f.path)
        fault = self.hub._take_fault(repo_id, f.path, _BODY_FAULTS) if self.command == "GET" else None
        total, hang, delay = f.size, None, 0.0
        if fault is not None:
            options = fault.options
            if fault.kind == "shift":
                start, stop = min(start + options["by"], f.size - 1), min(stop + options["by"], f.size)
            elif fault.kind == "from_zero":
                start, stop = 0, stop - start
            elif fault.kind == "multipart":
                headers["Content-Type"] = "multipart/byteranges; boundary=LOOPBACK"
            elif fault.kind == "gzip":
                headers["Content-Encoding"] = "gzip"
            elif fault.kind == "total":
                total = options["total"]
            elif fault.kind == "short":
                stop = min(stop, start + options["piece"])
            elif fault.kind == "trickle":
                delay = options.get("delay", 0.2)
            elif fault.kind == "hang":
                hang = options.get("sent", (stop - start) // 2)
            status = 206 if fault.kind != "multipart" or status == 206 else status
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{stop - 1}/{total}"
        cut = None
        self._record(status)
        if self.command == "GET":
            cut = self.hub._take_cut(key)
            with self.hub.lock:
                self.hub.file_gets[key] += 1
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(stop - start))
        self.end_headers()
        if self.command == "HEAD":
            return
        limit = stop if cut is None else min(stop, start + cut)
        limit = limit if hang is None else min(limit, start + hang)
        step = 1 if delay else CHUNK
        fd = os.open(f.local, os.O_RDONLY)
        try:
            at = start
            while at < limit:
                block = os.pread(fd, min(step, limit - at), at)
                if not block:
                    break
                # counted before it is sent, so a client that has the bytes finds them counted
                with self.hub.lock:
                    self.hub.bytes_served += len(block)
                    self.hub.served[key] += len(block)
                self.wfile.write(block)
                at += len(block)
                if delay:
                    self.wfile.flush()
                    if self.hub.stopping.wait(delay):
                        break
        finally:
            os.close(fd)
        if hang is not None:  # less sent than promised: the connection held open, silent
            self.wfile.flush()
            self.hub.stopping.wait(60)
            self.close_connection = True
        if (cut is not None and limit < stop) or delay:
            self.wfile.flush()
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True


# ---------------------------------------------------------------------- environment


def _guard_connections(hub: LoopbackHub) -> Any:
    """A replacement for socket.socket.connect refusing every address but 127.0.0.1 (and Unix sockets)."""
    original = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family != socket.AF_UNIX and not (isinstance(address, tuple) and address[0] == "127.0.0.1"):
            hub.foreign_connections.append(address)
            raise ConnectionRefusedError(f"loopback hub: a test tried to connect to {address!r}")
        return original(self, address)

    return connect


@contextlib.contextmanager
def hub_environment(hub: LoopbackHub, home: Path) -> Iterator[LoopbackHub]:
    """Point the environment and huggingface_hub at ``hub``, with every cache under ``home``.

    Sets HF_ENDPOINT, HF_HOME, HF_HUB_CACHE, XDG_CACHE_HOME, HF_HUB_DISABLE_XET=1,
    HF_HUB_DISABLE_TELEMETRY=1; removes HF_TOKEN (and the other token sources), HF_HUB_OFFLINE,
    TRANSFORMERS_OFFLINE; patches the huggingface_hub constants read at import (ENDPOINT, the URL
    template, the Hub origins, the cache and token paths, HF_HUB_OFFLINE, HF_HUB_DISABLE_XET);
    empties HfFileSystem's instance cache and closes the shared HTTP session on entry and exit;
    refuses connections to any address but 127.0.0.1 meanwhile. Everything is restored on exit.
    """
    from huggingface_hub import HfFileSystem, constants
    from huggingface_hub.utils import _http

    home = Path(home)
    hf_home = home / "hf"
    env = {
        "HF_ENDPOINT": hub.url,
        "HF_HOME": str(hf_home),
        "HF_HUB_CACHE": str(hf_home / "hub"),
        "XDG_CACHE_HOME": str(home / "xdg"),
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_UPDATE_CHECK": "1",
    }
    unset = (
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_TOKEN_PATH",
        "HF_OIDC_RESOURCE",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HUGGINGFACE_CO_STAGING",
        "HUGGINGFACE_HUB_CACHE",
        "HF_ASSETS_CACHE",
        "HUGGINGFACE_ASSETS_CACHE",
        "HF_XET_CACHE",
    )
    values = {
        "ENDPOINT": hub.url,
        "HUGGINGFACE_CO_URL_TEMPLATE": hub.url + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_URL_HOSTS": frozenset(constants.HF_URL_HOSTS | {"127.0.0.1"}),
        "HF_HOME": str(hf_home),
        "default_cache_path": str(hf_home / "hub"),
        "HF_HUB_CACHE": str(hf_home / "hub"),
        "HUGGINGFACE_HUB_CACHE": str(hf_home / "hub"),
        "default_assets_cache_path": str(hf_home / "assets"),
        "HF_ASSETS_CACHE": str(hf_home / "assets"),
        "HUGGINGFACE_ASSETS_CACHE": str(hf_home / "assets"),
        "HF_TOKEN_PATH": str(hf_home / "token"),
        "HF_STORED_TOKENS_PATH": str(hf_home / "stored_tokens"),
        "HF_XET_CACHE": str(hf_home / "xet"),
        "HF_HUB_OFFLINE": False,
        "HF_HUB_DISABLE_XET": True,
        "HF_HUB_DISABLE_TELEMETRY": True,
        "AGENT_HARNESSES_PATH": str(hf_home / ".agent_harnesses.json"),
    }
    # modules that copied a constant at import
    copies = [("huggingface_hub.utils._cache_manager", "HF_HUB_CACHE", values["HF_HUB_CACHE"])]
    copies.append(("huggingface_hub.utils._git_credential", "ENDPOINT", hub.url))
    copies.append(("huggingface_hub.utils._cache_assets", "HF_ASSETS_CACHE", values["HF_ASSETS_CACHE"]))
    origin = ("http", "127.0.0.1", int(hub.url.rsplit(":", 1)[1]))

    saved_env = {k: os.environ.get(k) for k in [*env, *unset]}
    saved_constants = {k: getattr(constants, k) for k in values if hasattr(constants, k)}
    saved_copies = []
    import importlib

    for module_name, name, value in copies:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if hasattr(module, name):
            saved_copies.append((module, name, getattr(module, name)))
            setattr(module, name, value)
    saved_origins = _http._HUB_ORIGINS
    saved_connect = socket.socket.connect
    try:
        for k in unset:
            os.environ.pop(k, None)
        os.environ.update(env)
        for k, v in values.items():
            if k in saved_constants:
                setattr(constants, k, v)
        _http._HUB_ORIGINS = frozenset(saved_origins | {origin})
        HfFileSystem.clear_instance_cache()
        _http.close_session()
        socket.socket.connect = _guard_connections(hub)  # type: ignore[method-assign]
        yield hub
    finally:
        socket.socket.connect = saved_connect  # type: ignore[method-assign]
        HfFileSystem.clear_instance_cache()
        _http.close_session()
        _http._HUB_ORIGINS = saved_origins
        for k, v in saved_constants.items():
            setattr(constants, k, v)
        for module, name, value in saved_copies:
            setattr(module, name, value)
        for k, old in saved_env.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


@contextlib.contextmanager
def serve_hub(home: str | os.PathLike[str], **options: Any) -> Iterator[LoopbackHub]:
    """A started :class:`LoopbackHub` with :func:`hub_environment` (caches under ``home``); stops it on exit.

    For benchmarks and scripts (the tests use the ``loopback_hub`` fixture)::

        sys.path.insert(0, str(REPO_ROOT))
        from tests.loopback_hub import serve_hub
        with serve_hub(tmp) as hub:
            commit = hub.add_repo("org/name", folder)
            ...
    """
    with LoopbackHub(**options) as hub, hub_environment(hub, Path(home)):
        yield hub
