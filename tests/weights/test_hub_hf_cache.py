"""Hub ids resolved through the Hugging Face cache first (HF_HUB_CACHE as huggingface_hub resolves it).

The cache is filled by huggingface_hub itself (``snapshot_download``, ``hf_hub_download``) from the
loopback hub, as a researcher's ``hf download`` or transformers would fill it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import qkenergy as qk
from qkenergy.weights.checkpoint import open_model

hf = pytest.importorskip("huggingface_hub")

REPO = "loopback/plain"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The files of main and of dev (written once for the module)."""
    from tests import hub_repos

    root = tmp_path_factory.mktemp("hf-cache-repos")
    return hub_repos.plain(root), hub_repos.plain(root / "dev", seed=7)


@pytest.fixture
def plain(folders: tuple[Path, Path], loopback_hub: Any) -> tuple[Path, str]:
    """loopback/plain on main (tag v1), and a second commit on the branch dev: (folder, first commit)."""
    folder, dev = folders
    commit = loopback_hub.add_repo(REPO, folder, tags=["v1"])
    loopback_hub.add_repo(REPO, dev, revision="dev")
    return folder, commit


def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def table(analysis: qk.Analysis) -> pd.DataFrame:
    return analysis.heads.drop(columns="model")


def test_a_model_in_the_hf_cache_is_analysed_by_its_id_offline(
    plain: tuple[Path, str], loopback_hub: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, commit = plain
    snapshot = Path(hf.snapshot_download(REPO))
    assert snapshot.name == commit
    offline(monkeypatch)
    loopback_hub.reset_counts()
    remote = qk.analyze(REPO, null=False, cache_dir=tmp_path / "c")
    pd.testing.assert_frame_equal(table(remote), table(qk.analyze(folder, null=False)))
    assert loopback_hub.log == [] and not (tmp_path / "c" / "hub").exists()  # not one request, no range cache
    with open_model(REPO) as source:
        assert (source.origin, source.root) == ("cache", snapshot)


def test_online_the_hf_cache_is_read_first(
    plain: tuple[Path, str], loopback_hub: Any, tmp_path: Path
) -> None:
    folder, _ = plain
    hf.snapshot_download(REPO)
    loopback_hub.reset_counts()
    remote = qk.analyze(REPO, null=False, cache_dir=tmp_path / "c")
    pd.testing.assert_frame_equal(table(remote), table(qk.analyze(folder, null=False)))
    assert loopback_hub.log == []


def test_revisions_through_the_hf_cache(
    plain: tuple[Path, str], loopback_hub: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tag or branch the cache has a ref for, a commit it has a snapshot of; the rest is not found
    offline (the hub route's line)."""
    _, commit = plain
    first = Path(hf.snapshot_download(REPO, revision="v1"))
    dev = Path(hf.snapshot_download(REPO, revision="dev"))
    assert first.name == commit and dev.name != commit
    offline(monkeypatch)
    for model, revision, snapshot in (
        (REPO, "v1", first),
        (REPO, commit, first),
        (REPO, "dev", dev),
        (f"{REPO}@dev", None, dev),
        (f"{REPO}@{commit}", None, first),
    ):
        with open_model(model, revision=revision) as source:
            assert (source.origin, source.root) == ("cache", snapshot), (model, revision)
    with pytest.raises(
        qk.QKEnergyError, match="HF_HUB_OFFLINE is set and this revision is not in the hub range"
    ):
        open_model(REPO, revision="v2")
    with pytest.raises(qk.QKEnergyError, match="names revision 'dev' and `revision` 'v1'"):
        open_model(f"{REPO}@dev", revision="v1")


def test_only_what_the_hf_cache_lacks_is_fetched(
    plain: tuple[Path, str], loopback_hub: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache holds config.json only (an ``hf download REPO config.json``): the weights come by
    range, the config is copied from the cache (its blob named by the listed ETag)."""
    folder, _ = plain
    hf.hf_hub_download(REPO, "config.json")
    loopback_hub.reset_counts()
    remote = qk.analyze(REPO, null=False, cache_dir=tmp_path / "c")
    pd.testing.assert_frame_equal(table(remote), table(qk.analyze(folder, null=False)))
    assert (
        loopback_hub.served[(REPO, "config.json")] == 0
        and loopback_hub.served[(REPO, "model.safetensors")] > 0
    )
    assert remote.settings["hub"]["bytes_fetched"] == loopback_hub.bytes_served
    # the range cache now holds what was read: offline, the same table
    offline(monkeypatch)
    loopback_hub.reset_counts()
    again = qk.analyze(REPO, null=False, cache_dir=tmp_path / "c")
    pd.testing.assert_frame_equal(table(again), table(remote))
    assert loopback_hub.log == []


def test_a_hf_cache_copy_that_is_not_the_listed_file_is_not_used(
    plain: tuple[Path, str], loopback_hub: Any, tmp_path: Path
) -> None:
    """A blob whose bytes were changed in place (its size differs from the listing's): fetched instead."""
    folder, _ = plain
    config = Path(hf.hf_hub_download(REPO, "config.json")).resolve()
    config.write_text(config.read_text() + " ")
    loopback_hub.reset_counts()
    remote = qk.analyze(REPO, null=False, cache_dir=tmp_path / "c")
    pd.testing.assert_frame_equal(table(remote), table(qk.analyze(folder, null=False)))
    assert loopback_hub.served[(REPO, "config.json")] == (folder / "config.json").stat().st_size


def test_a_hf_cache_snapshot_linking_out_of_its_blobs_is_refused(
    plain: tuple[Path, str], loopback_hub: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot = Path(hf.snapshot_download(REPO))
    outside = tmp_path / "elsewhere.json"
    outside.write_text("{}")
    (snapshot / "config.json").unlink()
    (snapshot / "config.json").symlink_to(outside)
    offline(monkeypatch)
    with pytest.raises(qk.QKEnergyError, match="a link out of the cache folder's blobs/"):
        open_model(REPO)


@pytest.mark.parametrize("revision", ["../../../escape", "a/../../b", "/abs", "-x"])
def test_a_revision_that_is_no_name_is_refused_before_any_path_is_made(
    plain: tuple[Path, str], loopback_hub: Any, tmp_path: Path, revision: str
) -> None:
    """revision= reaches refs/ of both caches: a revision that is not a branch, tag or commit name is
    refused, online, before a file is read or written."""
    hf.snapshot_download(REPO)
    loopback_hub.reset_counts()
    with pytest.raises(qk.QKEnergyError, match="is not a branch, tag or commit name"):
        open_model(REPO, revision=revision, hub_cache=tmp_path / "c" / "hub")
    assert loopback_hub.log == [] and not (tmp_path / "escape").exists()
    assert not (tmp_path / "c").exists()
