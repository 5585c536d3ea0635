"""The loopback hub (tests/loopback_hub.py) as huggingface_hub's own client sees it.

Every request goes through huggingface_hub 2.4.0 (HfApi, hf_hub_download, get_hf_file_metadata,
HfFileSystem); the expected values are computed here from the files (sizes, SHA-256, git blob ids
by the definition of git's object format) and, for the range reads, from the bytes on disk.
"""

from __future__ import annotations

import hashlib
import json
import socket
from pathlib import Path

import pytest

from tests import hub_repos
from tests.loopback_hub import HUGE_FILE, LoopbackHub

hf = pytest.importorskip("huggingface_hub")
from huggingface_hub import HfApi, HfFileSystem, constants, get_hf_file_metadata, hf_hub_download, hf_hub_url  # noqa: E402
from huggingface_hub.errors import (  # noqa: E402
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

WEIGHTS = "model.safetensors"


def git_blob_id(data: bytes) -> str:
    """What ``git hash-object`` prints: SHA-1 of the header ``blob <size>\\0`` and the content."""
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


@pytest.fixture
def plain(tmp_path: Path, loopback_hub: LoopbackHub) -> tuple[Path, str]:
    """loopback/plain served on main (tag v1): (folder, commit)."""
    folder = hub_repos.plain(tmp_path)
    return folder, loopback_hub.add_repo("loopback/plain", folder, tags=["v1"])


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """huggingface_hub's retries wait 1, 2, 4... s; the waits are recorded instead of slept."""
    import huggingface_hub.file_download
    import huggingface_hub.utils._http

    waits: list[float] = []
    for module in (huggingface_hub.utils._http, huggingface_hub.file_download):
        monkeypatch.setattr(module, "time", type("T", (), {"sleep": staticmethod(waits.append)}))
    return waits


def test_the_fixture_points_huggingface_hub_at_the_loopback(loopback_hub: LoopbackHub) -> None:
    import os

    assert constants.ENDPOINT == loopback_hub.url == os.environ["HF_ENDPOINT"]
    assert loopback_hub.url.startswith("http://127.0.0.1:")
    assert hf_hub_url("a/b", "c").startswith(loopback_hub.url + "/a/b/resolve/main/")
    assert "HF_TOKEN" not in os.environ and not constants.HF_HUB_OFFLINE and constants.HF_HUB_DISABLE_XET
    assert Path(constants.HF_HUB_CACHE).is_relative_to(Path(os.environ["HF_HOME"]))
    assert hf.get_token() is None


def test_model_info_sha_siblings_sizes_and_lfs(plain: tuple[Path, str], loopback_hub: LoopbackHub) -> None:
    folder, commit = plain
    info = HfApi().model_info("loopback/plain", files_metadata=True)
    assert info.sha == commit and len(commit) == 40
    by_name = {s.rfilename: s for s in info.siblings or []}
    assert set(by_name) == {"config.json", WEIGHTS}
    for name, sibling in by_name.items():
        data = (folder / name).read_bytes()
        assert sibling.size == len(data)
    weights = (folder / WEIGHTS).read_bytes()
    lfs = by_name[WEIGHTS].lfs
    assert lfs is not None and lfs.sha256 == hashlib.sha256(weights).hexdigest() and lfs.size == len(weights)
    pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{lfs.sha256}\nsize {len(weights)}\n"
    assert by_name[WEIGHTS].blob_id == git_blob_id(pointer.encode())
    assert by_name["config.json"].lfs is None
    assert by_name["config.json"].blob_id == git_blob_id((folder / "config.json").read_bytes())
    assert info.config == {"model_type": "llama"}
    # without files_metadata the siblings carry names only, as the Hub's; expand keeps what it names
    assert [s.size for s in HfApi().model_info("loopback/plain").siblings or []] == [None, None]
    short = HfApi().model_info("loopback/plain", expand=["sha"])
    assert (short.sha, short.siblings, short.private) == (commit, None, None)
    # the same folder gives the same commit (a fresh hub, no state shared)
    assert LoopbackHub().add_repo("loopback/plain", folder) == commit


def test_listing_paginates_and_paths_info(tmp_path: Path, loopback_hub: LoopbackHub) -> None:
    folder = tmp_path / "nested"
    for name in ("a.txt", "b/c.txt", "b/d/e.safetensors", "b/d/f.txt", "g.json"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(name)
    commit = loopback_hub.add_repo("org/nested", folder)
    api = HfApi()
    loopback_hub.page_size = 2
    loopback_hub.reset_counts()
    entries = list(api.list_repo_tree("org/nested", recursive=True))
    assert sorted(e.path for e in entries) == [
        "a.txt",
        "b",
        "b/c.txt",
        "b/d",
        "b/d/e.safetensors",
        "b/d/f.txt",
        "g.json",
    ]
    assert sum("/tree/" in r.path for r in loopback_hub.log) == 4  # 7 entries, 2 a page
    top = list(api.list_repo_tree("org/nested"))
    assert [(e.path, type(e).__name__) for e in top] == [
        ("b", "RepoFolder"),
        ("a.txt", "RepoFile"),
        ("g.json", "RepoFile"),
    ]
    assert [e.path for e in api.list_repo_tree("org/nested", "b/d")] == ["b/d/e.safetensors", "b/d/f.txt"]
    expanded = list(api.list_repo_tree("org/nested", "b", expand=True))
    assert {e.last_commit.oid for e in expanded if e.last_commit} == {commit}
    assert sorted(api.list_repo_files("org/nested")) == [
        "a.txt",
        "b/c.txt",
        "b/d/e.safetensors",
        "b/d/f.txt",
        "g.json",
    ]
    infos = api.get_paths_info("org/nested", ["b/d/e.safetensors", "b", "missing.txt"])
    assert [(i.path, type(i).__name__) for i in infos] == [
        ("b/d/e.safetensors", "RepoFile"),
        ("b", "RepoFolder"),
    ]
    assert (
        infos[0].lfs is not None and infos[0].lfs.sha256 == hashlib.sha256(b"b/d/e.safetensors").hexdigest()
    )
    with pytest.raises(RemoteEntryNotFoundError):
        list(api.list_repo_tree("org/nested", "nowhere"))


def test_hf_hub_download_records_commit_and_etag(plain: tuple[Path, str], loopback_hub: LoopbackHub) -> None:
    folder, commit = plain
    path = Path(hf_hub_download("loopback/plain", "config.json"))
    assert path.read_bytes() == (folder / "config.json").read_bytes()
    storage = Path(constants.HF_HUB_CACHE) / "models--loopback--plain"
    assert (storage / "refs" / "main").read_text() == commit
    assert path == storage / "snapshots" / commit / "config.json"
    assert path.resolve().name == git_blob_id(path.read_bytes())  # the blob is named by its ETag
    # an LFS file: HEAD answered by the 302 itself, GET follows it to the CDN without the token
    loopback_hub.reset_counts()
    weights = Path(hf_hub_download("loopback/plain", WEIGHTS, token=loopback_hub.token))
    assert weights.read_bytes() == (folder / WEIGHTS).read_bytes()
    assert weights.resolve().name == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert [(r.method, r.listener, r.status, r.authorized) for r in loopback_hub.log] == [
        ("HEAD", "hub", 302, True),
        ("GET", "cdn", 200, False),
    ]
    assert loopback_hub.bytes_served == (folder / WEIGHTS).stat().st_size
    # cached: a second call makes one HEAD and sends no body; by commit id, no request at all
    loopback_hub.reset_counts()
    hf_hub_download("loopback/plain", WEIGHTS)
    assert [r.method for r in loopback_hub.log] == ["HEAD"] and loopback_hub.bytes_served == 0
    loopback_hub.reset_counts()
    assert hf_hub_download("loopback/plain", WEIGHTS, revision=commit) == str(weights)
    assert loopback_hub.log == []


def test_get_hf_file_metadata(plain: tuple[Path, str], loopback_hub: LoopbackHub) -> None:
    folder, commit = plain
    config = (folder / "config.json").read_bytes()
    meta = get_hf_file_metadata(hf_hub_url("loopback/plain", "config.json"))
    assert (meta.commit_hash, meta.etag, meta.size, meta.xet_file_data) == (
        commit,
        git_blob_id(config),
        len(config),
        None,
    )
    weights = (folder / WEIGHTS).read_bytes()
    loopback_hub.reset_counts()
    meta = get_hf_file_metadata(hf_hub_url("loopback/plain", WEIGHTS))
    assert (meta.commit_hash, meta.etag, meta.size) == (
        commit,
        hashlib.sha256(weights).hexdigest(),
        len(weights),
    )
    assert meta.location.startswith(loopback_hub.cdn_url + "/lfs/loopback/plain/" + commit)
    assert [(r.method, r.listener) for r in loopback_hub.log] == [("HEAD", "hub")]


def test_hf_file_system_reads_exact_ranges_with_cache_type_none(
    plain: tuple[Path, str], loopback_hub: LoopbackHub
) -> None:
    folder, _ = plain
    data = (folder / WEIGHTS).read_bytes()
    fs = HfFileSystem()
    assert fs.ls("loopback/plain", detail=False) == [
        "loopback/plain/config.json",
        "loopback/plain/" + WEIGHTS,
    ]
    assert fs.info("loopback/plain/" + WEIGHTS)["size"] == len(data)
    loopback_hub.reset_counts()
    with fs.open("loopback/plain/" + WEIGHTS, "rb", cache_type="none") as f:
        f.seek(1000)
        assert f.read(321) == data[1000:1321]
        assert f.read(8) == data[1321:1329]
    assert loopback_hub.bytes_served == 321 + 8
    assert [r.range for r in loopback_hub.log if r.listener == "cdn"] == [
        "bytes=1000-1320",
        "bytes=1321-1328",
    ]
    loopback_hub.reset_counts()
    assert fs.cat_file("loopback/plain/" + WEIGHTS, start=8, end=100, cache_type="none") == data[8:100]
    assert loopback_hub.bytes_served == 92
    # the default (readahead, 5 MiB blocks) fetches to the end of this small file
    loopback_hub.reset_counts()
    with fs.open("loopback/plain/" + WEIGHTS, "rb") as f:
        f.seek(1000)
        assert f.read(10) == data[1000:1010]
    assert loopback_hub.bytes_served == len(data) - 1000
    # reading to the end: a suffix range; past the end: nothing
    with fs.open("loopback/plain/" + WEIGHTS, "rb", cache_type="none") as f:
        f.seek(len(data) - 5)
        assert f.read() == data[-5:]
        assert f.read(10) == b""


def test_revisions_branch_tag_and_commit(
    plain: tuple[Path, str], tmp_path: Path, loopback_hub: LoopbackHub
) -> None:
    folder, first = plain
    other = hub_repos.plain(tmp_path / "second", seed=7)
    second = loopback_hub.add_repo("loopback/plain", other, revision="dev", tags=["v2"])
    assert second != first
    api = HfApi()
    for revision, commit in (("main", first), ("v1", first), ("dev", second), ("v2", second), (first, first)):
        assert api.model_info("loopback/plain", revision=revision).sha == commit
        meta = get_hf_file_metadata(hf_hub_url("loopback/plain", WEIGHTS, revision=revision))
        assert meta.commit_hash == commit
    refs = api.list_repo_refs("loopback/plain")
    assert {(b.name, b.target_commit) for b in refs.branches} == {("main", first), ("dev", second)}
    assert {(t.name, t.ref, t.target_commit) for t in refs.tags} == {
        ("v1", "refs/tags/v1", first),
        ("v2", "refs/tags/v2", second),
    }
    path = hf_hub_download("loopback/plain", WEIGHTS, revision="v2")
    assert Path(path).read_bytes() == (other / WEIGHTS).read_bytes()
    fs = HfFileSystem()
    with fs.open(f"loopback/plain@{second}/{WEIGHTS}", "rb", cache_type="none") as f:
        assert f.read(64) == (other / WEIGHTS).read_bytes()[:64]
    with fs.open(f"loopback/plain@v1/{WEIGHTS}", "rb", cache_type="none") as f:
        assert f.read(64) == (folder / WEIGHTS).read_bytes()[:64]
    with pytest.raises(RevisionNotFoundError):
        api.model_info("loopback/plain", revision="nope")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download("loopback/plain", "config.json", revision="0" * 40)
    with pytest.raises(FileNotFoundError, match="revision not found") as info:
        fs.info("loopback/plain@nope/config.json")
    assert isinstance(info.value.__cause__, RevisionNotFoundError)


def test_hf_file_system_keeps_its_listing_when_a_branch_moves(
    plain: tuple[Path, str], tmp_path: Path, loopback_hub: LoopbackHub
) -> None:
    """HfFileSystem() is one instance per thread, endpoint and token, and it caches listings.

    After main moves, the cached size is the old commit's while a read of ``@main`` gets the new
    commit's bytes: a reader must resolve the commit once and read ``org/name@commit/...``.
    """
    folder, first = plain
    fs = HfFileSystem()
    old = fs.info("loopback/plain/" + WEIGHTS)["size"]
    other = hub_repos.plain(tmp_path / "second", layers=2)
    loopback_hub.add_repo("loopback/plain", other)
    assert HfFileSystem() is fs and fs.info("loopback/plain/" + WEIGHTS)["size"] == old
    new = (other / WEIGHTS).stat().st_size
    assert new != old and fs.info("loopback/plain/" + WEIGHTS, refresh=True)["size"] == new
    with fs.open(f"loopback/plain@{first}/{WEIGHTS}", "rb", cache_type="none") as f:
        assert f.read(32) == (folder / WEIGHTS).read_bytes()[:32]


def test_private_repo(tmp_path: Path, loopback_hub: LoopbackHub) -> None:
    loopback_hub.add_repo("org/secret", hub_repos.no_weights(tmp_path), private=True)
    api = HfApi()
    with pytest.raises(RepositoryNotFoundError) as info:
        api.model_info("org/secret")
    assert info.value.response.status_code == 401
    with pytest.raises(RepositoryNotFoundError) as info:
        hf_hub_download("org/secret", "config.json")
    assert info.value.response.status_code == 401
    with pytest.raises(RepositoryNotFoundError) as info:  # valid, but not granted: told as missing
        api.model_info("org/secret", token=loopback_hub.other_token)
    assert info.value.response.status_code == 404
    with pytest.raises(HfHubHTTPError) as info:  # a token the hub does not know
        api.model_info("org/secret", token="hf_wrong")
    assert info.value.response.status_code == 401 and not isinstance(info.value, RepositoryNotFoundError)
    assert api.model_info("org/secret", token=loopback_hub.token).private is True
    path = hf_hub_download("org/secret", "config.json", token=loopback_hub.token)
    assert Path(path).read_text() == (tmp_path / "no_weights" / "config.json").read_text()
    with pytest.raises(FileNotFoundError, match="repository not found"):
        HfFileSystem().ls("org/secret")
    assert HfFileSystem(token=loopback_hub.token).ls("org/secret", detail=False)


def test_gated_repo(plain: tuple[Path, str], tmp_path: Path, loopback_hub: LoopbackHub) -> None:
    folder, _ = plain
    loopback_hub.add_repo("org/gated", folder, gated=True)
    api = HfApi()
    info = api.model_info("org/gated")  # the card and listing are public on the Hub
    assert info.gated == "manual"
    assert HfFileSystem().info("org/gated/" + WEIGHTS)["size"] == (folder / WEIGHTS).stat().st_size
    with pytest.raises(GatedRepoError) as error:
        hf_hub_download("org/gated", "config.json")
    assert error.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as error:
        hf_hub_download("org/gated", "config.json", token=loopback_hub.other_token)
    assert error.value.response.status_code == 403
    with (
        pytest.raises(GatedRepoError),
        HfFileSystem().open("org/gated/" + WEIGHTS, "rb", cache_type="none") as f,
    ):
        f.read(8)
    assert hf_hub_download("org/gated", "config.json", token=loopback_hub.token)
    assert loopback_hub.bytes_served == (folder / "config.json").stat().st_size


def test_unknown_repo_and_file(plain: tuple[Path, str], loopback_hub: LoopbackHub) -> None:
    with pytest.raises(RepositoryNotFoundError):
        HfApi().model_info("org/none")
    with pytest.raises(RepositoryNotFoundError) as info:
        HfApi().model_info("org/none", token=loopback_hub.token)
    assert info.value.response.status_code == 404
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("loopback/plain", "tokenizer.json")
    with pytest.raises(RemoteEntryNotFoundError):
        get_hf_file_metadata(hf_hub_url("loopback/plain", "tokenizer.json"))
    with pytest.raises(FileNotFoundError):
        HfFileSystem().info("loopback/plain/tokenizer.json")


def test_a_cut_download_is_retried(
    plain: tuple[Path, str], loopback_hub: LoopbackHub, no_sleep: list[float]
) -> None:
    """hf_hub_download retries; it resumes only from whole chunks of DOWNLOAD_CHUNK_SIZE (10 MiB).

    httpx2's ``iter_bytes(chunk_size)`` yields nothing before a full chunk, so a file cut within its
    first 10 MiB is fetched again from byte 0, without a Range header.
    """
    folder, _ = plain
    data = (folder / WEIGHTS).read_bytes()
    assert len(data) < constants.DOWNLOAD_CHUNK_SIZE
    loopback_hub.cut("loopback/plain", WEIGHTS, after_bytes=1000)
    loopback_hub.reset_counts()
    assert Path(hf_hub_download("loopback/plain", WEIGHTS)).read_bytes() == data
    gets = [r for r in loopback_hub.log if r.listener == "cdn"]
    assert [(r.method, r.range, r.status) for r in gets] == [("GET", None, 200), ("GET", None, 200)]
    assert loopback_hub.served[("loopback/plain", WEIGHTS)] == 1000 + len(data) == loopback_hub.bytes_served
    assert loopback_hub.file_gets[("loopback/plain", WEIGHTS)] == 2 and no_sleep == [1]


def test_a_cut_ranged_read_is_retried_whole(
    plain: tuple[Path, str], loopback_hub: LoopbackHub, no_sleep: list[float]
) -> None:
    """HfFileSystem's _fetch_range goes through http_backoff: a cut range is asked again, whole."""
    folder, _ = plain
    data = (folder / WEIGHTS).read_bytes()
    fs = HfFileSystem()
    fs.info("loopback/plain/" + WEIGHTS)
    loopback_hub.cut("loopback/plain", WEIGHTS, after_bytes=100)
    loopback_hub.reset_counts()
    with fs.open("loopback/plain/" + WEIGHTS, "rb", cache_type="none") as f:
        f.seek(500)
        assert f.read(1000) == data[500:1500]
    assert [r.range for r in loopback_hub.log if r.listener == "cdn"] == ["bytes=500-1499"] * 2
    assert loopback_hub.bytes_served == 1100 and no_sleep == [1]


def test_a_connection_cut_for_good_is_an_error(
    plain: tuple[Path, str], loopback_hub: LoopbackHub, no_sleep: list[float]
) -> None:
    import httpx2

    loopback_hub.cut("loopback/plain", WEIGHTS, after_bytes=10, times=100)
    fs = HfFileSystem()
    fs.info("loopback/plain/" + WEIGHTS)
    loopback_hub.reset_counts()
    with (
        pytest.raises(httpx2.RemoteProtocolError),
        fs.open("loopback/plain/" + WEIGHTS, "rb", cache_type="none") as f,
    ):
        f.read(100)
    assert loopback_hub.file_gets[("loopback/plain", WEIGHTS)] == 6  # the first try and 5 retries
    assert loopback_hub.bytes_served == 60 and len(no_sleep) == 5


def test_injected_statuses(plain: tuple[Path, str], loopback_hub: LoopbackHub, no_sleep: list[float]) -> None:
    folder, _ = plain
    loopback_hub.fail("loopback/plain", 503)
    with pytest.raises(HfHubHTTPError) as info:
        HfApi().model_info("loopback/plain")  # no retry in model_info
    assert info.value.response.status_code == 503
    assert HfApi().model_info("loopback/plain").sha  # once only
    fs = HfFileSystem()
    fs.info("loopback/plain/" + WEIGHTS)
    loopback_hub.fail("loopback/plain", 500, times=2)
    with fs.open("loopback/plain/" + WEIGHTS, "rb", cache_type="none") as f:  # ranged reads retry 5xx
        assert f.read(16) == (folder / WEIGHTS).read_bytes()[:16]
    assert [r.status for r in loopback_hub.log[-4:]] == [500, 500, 302, 206] and no_sleep == [1, 2]


def test_a_huge_sparse_file_is_never_read_whole(tmp_path: Path, loopback_hub: LoopbackHub) -> None:
    folder = tmp_path / "huge"
    folder.mkdir()
    size = HUGE_FILE + 2**30
    head = b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "
    with open(folder / WEIGHTS, "wb") as fh:
        fh.write(head)
        fh.truncate(size)  # a hole: no disk used, and reading it whole would take seconds
    commit = loopback_hub.add_repo("org/huge", folder)
    digest = hashlib.sha256(b"loopback-hub-standin\0" + WEIGHTS.encode() + b"\0" + str(size).encode() + b"\0")
    digest.update(head + bytes(2**20 - len(head)))
    meta = get_hf_file_metadata(hf_hub_url("org/huge", WEIGHTS))
    assert (meta.etag, meta.size, meta.commit_hash) == (digest.hexdigest(), size, commit)
    with HfFileSystem().open("org/huge/" + WEIGHTS, "rb", cache_type="none", size=size) as f:
        assert f.read(16) == head
        f.seek(size - 4)
        assert f.read(4) == bytes(4)
    assert loopback_hub.bytes_served == 20


def test_only_the_loopback_is_contacted(plain: tuple[Path, str], loopback_hub: LoopbackHub) -> None:
    HfApi().model_info("loopback/plain")
    HfFileSystem().cat_file("loopback/plain/config.json")
    assert loopback_hub.foreign_connections == []
    with socket.socket() as sock, pytest.raises(ConnectionRefusedError, match="192.0.2.1"):
        sock.connect(("192.0.2.1", 443))  # TEST-NET-1: refused before any packet leaves
    import httpx2

    with pytest.raises(httpx2.ConnectError, match="192.0.2.1"):
        HfApi(endpoint="http://192.0.2.1").model_info("a/b")
    assert loopback_hub.foreign_connections == [("192.0.2.1", 443), ("192.0.2.1", 80)]


@pytest.mark.parametrize("name", list(hub_repos.BUILDERS))
def test_the_repositories_read_locally_as_documented(name: str, tmp_path: Path) -> None:
    from qkenergy.analysis.analyze import analyze_model
    from qkenergy.base.errors import QKEnergyError

    folder = hub_repos.BUILDERS[name](tmp_path)
    refused = {
        "gguf_many": "3 GGUF files",
        "pickle_only": "pickled PyTorch checkpoints are not loaded",
        "no_weights": "no weights found",
    }
    if name in refused:
        with pytest.raises(QKEnergyError, match=refused[name].replace("*", r"\*")):
            analyze_model(str(folder), null=False, threads=1)
        return
    result = analyze_model(str(folder), null=False, threads=1)
    layers = {"plain": 3, "sharded": 4}.get(name, 2)
    assert sorted(set(result.columns["layer"])) == list(range(layers))
    if name == "sharded":
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        for layer in range(layers):
            shards = {index["weight_map"][f"model.layers.{layer}.self_attn.{p}_proj.weight"] for p in "qk"}
            assert len(shards) == 2


@pytest.mark.parametrize("name", ["plain", "sharded"])
def test_a_hub_id_reads_as_its_local_folder(name: str, tmp_path: Path, loopback_hub: LoopbackHub) -> None:
    """The hub reading of a repo gives the table of the local reading of its files, fetched from 127.0.0.1 only."""
    from qkenergy.analysis.analyze import analyze_model

    ((repo_id, (folder, _)),) = hub_repos.publish(loopback_hub, tmp_path, [name]).items()
    remote = analyze_model(repo_id, null=False, threads=1)
    local = analyze_model(str(folder), null=False, threads=1)
    assert list(remote.columns["symmetric_energy"]) == list(local.columns["symmetric_energy"])
    assert loopback_hub.bytes_served > 0 and loopback_hub.foreign_connections == []


@pytest.mark.parametrize(
    ("kind", "options", "status", "content_range", "header"),
    [
        ("shift", {"by": 100}, 206, "bytes 1100-1199/{size}", None),
        ("from_zero", {}, 206, "bytes 0-99/{size}", None),
        ("short", {"piece": 30}, 206, "bytes 1000-1029/{size}", None),
        ("total", {"total": 7}, 206, "bytes 1000-1099/7", None),
        (
            "multipart",
            {},
            206,
            "bytes 1000-1099/{size}",
            ("Content-Type", "multipart/byteranges; boundary=LOOPBACK"),
        ),
        ("gzip", {}, 206, "bytes 1000-1099/{size}", ("Content-Encoding", "gzip")),
        ("etag", {"etag": "f" * 64}, 206, "bytes 1000-1099/{size}", None),
    ],
)
def test_injected_answers_are_what_inject_says(
    plain: tuple[Path, str],
    loopback_hub: LoopbackHub,
    kind: str,
    options: dict[str, object],
    status: int,
    content_range: str,
    header: tuple[str, str] | None,
) -> None:
    """Each fault of ``LoopbackHub.inject`` on the wire (read raw, no decoding), once; then honest again."""
    import httpx2

    folder, _ = plain
    data = (folder / WEIGHTS).read_bytes()
    url = hf_hub_url("loopback/plain", WEIGHTS)
    loopback_hub.inject("loopback/plain", kind, path=WEIGHTS, **options)
    with httpx2.Client(follow_redirects=True) as client:
        for _ in range(2):
            with client.stream("GET", url, headers={"Range": "bytes=1000-1099"}) as r:
                body = b"".join(r.iter_raw())
                first = r.history[0] if r.history else r
                if kind == "etag":
                    assert first.headers["X-Linked-Etag"] == f'"{options["etag"]}"'
                if header is not None:
                    assert r.headers[header[0]] == header[1]
                assert (r.status_code, r.headers["Content-Range"]) == (
                    status,
                    content_range.format(size=len(data)),
                )
                begin, end = (
                    int(x) for x in r.headers["Content-Range"].split(" ")[1].split("/")[0].split("-")
                )
                assert body == data[begin : end + 1]
            kind, content_range, header = "none", "bytes 1000-1099/{size}", None  # the fault was used once
            status = 206
            options = {}
