"""Hub models read by byte range, against the loopback hub (tests/loopback_hub.py): the table equals the
local analysis of the same files, the bytes fetched stay within 1.05 x the floor (+ 64 KiB a file), a
rerun fetches nothing and works offline, revisions, access, broken transfers and surveys."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import qkenergy as qk
from qkenergy.weights.gguf_io import read_header
from qkenergy.weights.hub import parse_hub_reference
from tests.cli.test_commands import run  # the console entry point in-process: (status, stdout, stderr)

pytest.importorskip("huggingface_hub")

SMALL = ("config.json", "model.safetensors.index.json", "quantize_config.json")
SLACK = 64 << 10  # what a file may cost beyond the floor: its header is fetched in a 64 KiB first read


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny repositories of tests/hub_repos.py, written once for the module."""
    from tests import hub_repos

    root = tmp_path_factory.mktemp("repos")
    return {name: build(root) for name, build in hub_repos.BUILDERS.items()}


def serve(hub: Any, repos: dict[str, Path], *names: str) -> dict[str, str]:
    """Serve these repositories as loopback/NAME; their commits."""
    return {name: hub.add_repo(f"loopback/{name.replace('_', '-')}", repos[name]) for name in names}


def header_end(path: Path) -> int:
    if path.suffix == ".gguf":
        return read_header(path).data_start
    with open(path, "rb") as fh:
        return 8 + struct.unpack("<Q", fh.read(8))[0]


def floor(folder: Path, analysis: qk.Analysis) -> tuple[int, int]:
    """(the bytes a byte-range reading cannot do without, the files it touches) for this analysis.

    The small files whole, the header of every weight file read (and of every other file of a
    repository without a shard index, whose headers say which file holds a tensor) and the byte
    ranges of the tensors read: each file's fingerprint hashes exactly its header and the tensors
    read (``hashed_bytes``).
    """
    indexed = (folder / "model.safetensors.index.json").is_file()
    read = {Path(f["path"]).name: int(f["hashed_bytes"]) for f in analysis.settings["model_source"]["files"]}
    total, files = sum(read.values()), len(read)
    for path in folder.iterdir():
        if path.name in SMALL:
            total, files = total + path.stat().st_size, files + 1
        elif path.suffix == ".safetensors" and path.name not in read and not indexed:
            total, files = total + header_end(path), files + 1
    return total, files


def same_table(remote: qk.Analysis, local: qk.Analysis) -> None:
    pd.testing.assert_frame_equal(remote.heads.drop(columns="model"), local.heads.drop(columns="model"))


# ----------------------------------------------------------------------------- references


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("org/name", ("org/name", None, None)),
        ("gpt2", ("gpt2", None, None)),
        ("org/name@v1.0", ("org/name", "v1.0", None)),
        ("org/name/model-Q4_K_M.gguf", ("org/name", None, "model-Q4_K_M.gguf")),
        ("org/name@0123abc/sub/x.gguf", ("org/name", "0123abc", "sub/x.gguf")),
        ("org/name/x.safetensors", ("org/name", None, "x.safetensors")),
    ],
)
def test_hub_references(text: str, expected: tuple[Any, ...]) -> None:
    ref = parse_hub_reference(text)
    assert ref is not None and (ref.repo_id, ref.revision, ref.filename) == expected


@pytest.mark.parametrize("text", ["./x", "/abs/x", "~/x", "a/../b", "x.safetensors", "org/name/x.bin", "a b"])
def test_not_hub_references(text: str) -> None:
    assert parse_hub_reference(text) is None


# ----------------------------------------------------------------------------- equal to the local reading


@pytest.mark.parametrize("name", ["plain", "sharded", "fp8", "deepseek_fp8", "gptq", "gguf"])
def test_remote_equals_local_within_the_floor_then_nothing_twice(
    loopback_hub: Any, repos: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    serve(loopback_hub, repos, name)
    repo_id = f"loopback/{name.replace('_', '-')}"
    local_path = next(repos[name].glob("*.gguf")) if name == "gguf" else repos[name]
    cache = tmp_path / "cache"

    remote = qk.analyze(repo_id, null=False, cache_dir=cache)
    local = qk.analyze(local_path, null=False)
    same_table(remote, local)

    fetched = loopback_hub.bytes_served
    needed, files = floor(repos[name], remote)
    assert remote.settings["hub"]["bytes_fetched"] == fetched
    assert fetched <= 1.05 * needed + SLACK * files, (fetched, needed, files)
    assert fetched >= needed  # every byte read was fetched: the floor is a floor
    hub = remote.settings["hub"]
    assert hub["repo_id"] == repo_id and len(hub["commit"]) == 40 and hub["revision"] == "main"
    assert hub["repository_bytes"] == sum(p.stat().st_size for p in repos[name].iterdir())
    assert all(len(f["etag"]) == 64 for p, f in hub["files"].items() if p.endswith((".safetensors", ".gguf")))
    source = remote.settings["model_source"]
    assert source["hub_id"] == repo_id and source["revision"] == hub["commit"]

    # a rerun fetches nothing; offline, the range cache alone answers
    loopback_hub.reset_counts()
    again = qk.analyze(repo_id, null=False, cache_dir=cache)
    assert loopback_hub.bytes_served == 0 and again.settings["hub"]["bytes_fetched"] == 0
    same_table(again, local)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    loopback_hub.reset_counts()
    offline = qk.analyze(repo_id, null=False, cache_dir=cache)
    assert loopback_hub.log == []  # not one request
    same_table(offline, local)


def test_fewer_layers_fetch_less_and_more_layers_only_the_rest(
    loopback_hub: Any, repos: dict[str, Path], tmp_path: Path
) -> None:
    serve(loopback_hub, repos, "sharded")
    cache = tmp_path / "cache"
    first = qk.analyze("loopback/sharded", layers=[0], null=False, cache_dir=cache)
    one_layer = loopback_hub.bytes_served
    loopback_hub.reset_counts()
    both = qk.analyze("loopback/sharded", layers=[0, 1], null=False, cache_dir=cache)
    second = loopback_hub.bytes_served
    local = qk.analyze(repos["sharded"], layers=[0, 1], null=False)
    same_table(both, local)
    needed, _ = floor(repos["sharded"], both)
    assert one_layer + second <= 1.05 * needed + SLACK * 4
    assert second < one_layer  # the headers and layer 0 came with the first run
    assert first.heads["layer"].unique().tolist() == [0]
    # the index says where each tensor is: only the shards holding layer 0's query and key were opened
    index = json.loads((repos["sharded"] / "model.safetensors.index.json").read_text())["weight_map"]
    needed_shards = {index[f"model.layers.0.self_attn.{p}_proj.weight"] for p in "qk"}
    assert set(first.settings["hub"]["files"]) == {
        "config.json",
        "model.safetensors.index.json",
        *needed_shards,
    }
    assert len(needed_shards) < len(set(index.values()))


def test_a_gguf_file_chosen_and_many_refused(
    loopback_hub: Any, repos: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    serve(loopback_hub, repos, "gguf_many")
    code, _, err = run(
        capsys, "analyze", "loopback/gguf-many", "--no-null", "--cache-dir", str(tmp_path / "c")
    )
    assert code == 1 and err.count("\n") == 1
    assert "holds 3 GGUF models" in err and "loopback/gguf-many/tiny-qwen2-Q4_0.gguf" in err
    loopback_hub.reset_counts()
    chosen = "tiny-qwen2-Q5_1.gguf"
    remote = qk.analyze(f"loopback/gguf-many/{chosen}", null=False, cache_dir=tmp_path / "c")
    same_table(remote, qk.analyze(repos["gguf_many"] / chosen, null=False))
    assert set(remote.settings["hub"]["files"]) == {chosen}
    served = {path for (_, path) in loopback_hub.served}
    assert served == {chosen}  # the other GGUF files are never touched


# ----------------------------------------------------------------------------- revisions and access


def test_revisions_branch_tag_commit(loopback_hub: Any, repos: dict[str, Path], tmp_path: Path) -> None:
    from tests import hub_repos

    first = loopback_hub.add_repo("loopback/plain", repos["plain"], tags=["v1"])
    other = hub_repos.plain(tmp_path / "v2", seed=7)
    second = loopback_hub.add_repo("loopback/plain", other, revision="dev")
    cache = tmp_path / "cache"
    main = qk.analyze("loopback/plain", null=False, cache_dir=cache)
    dev = qk.analyze("loopback/plain@dev", null=False, cache_dir=cache)
    assert main.settings["hub"]["commit"] == first and dev.settings["hub"]["commit"] == second
    same_table(dev, qk.analyze(other, null=False))
    for text, revision in (
        ("loopback/plain@v1", None),
        (f"loopback/plain@{first}", None),
        ("loopback/plain", "v1"),
    ):
        pinned = qk.analyze(text, null=False, cache_dir=cache, revision=revision)
        assert pinned.settings["hub"]["commit"] == first
        same_table(pinned, main)
    with pytest.raises(qk.QKEnergyError, match="names revision 'dev' and `revision` 'v1'"):
        qk.analyze("loopback/plain@dev", revision="v1", null=False, cache_dir=cache)


def test_cli_revision_reads_that_revision(
    loopback_hub: Any, repos: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`qkenergy analyze ORG/NAME --revision REV` (docs/hub.md): the branch's weights, its commit recorded."""
    from tests import hub_repos

    loopback_hub.add_repo("loopback/plain", repos["plain"])
    other = hub_repos.plain(tmp_path / "dev", seed=11)
    dev = loopback_hub.add_repo("loopback/plain", other, revision="dev")
    out = tmp_path / "dev.csv"
    code, _, err = run(
        capsys, "analyze", "loopback/plain", "--revision", "dev", "--no-null", "--quiet", "-o", str(out),
        "--cache-dir", str(tmp_path / "c"),
    )  # fmt: skip
    assert code == 0, err
    remote = qk.read(out)
    assert remote.settings["hub"]["commit"] == dev
    local = qk.analyze(other, null=False)
    pd.testing.assert_frame_equal(
        remote.heads.drop(columns="model"), local.heads.drop(columns="model"), check_dtype=False
    )
    code, _, err = run(capsys, "analyze", "loopback/plain@dev", "--revision", "main", "--no-null", "--quiet")
    assert code != 0 and "--revision" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("setup", "model", "needle"),
    [
        ("none", "loopback/absent", "loopback/absent: no such repository on http://127.0.0.1"),
        ("private", "loopback/plain", "private one this token cannot read"),
        ("gated", "loopback/plain", "a gated repository"),
        ("plain", "loopback/plain@nope", "the Hub has no revision 'nope'"),
        ("plain", "loopback/plain/nope.gguf", "has no file 'nope.gguf' at commit"),
        ("pickle_only", "loopback/pickle-only", "holds only pickled weights ('pytorch_model.bin')"),
        ("no_weights", "loopback/no-weights", "no safetensors or GGUF weights at commit"),
    ],
)
def test_refusals_are_one_line_exit_1_nothing_written(
    loopback_hub: Any,
    repos: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    setup: str,
    model: str,
    needle: str,
) -> None:
    if setup in ("private", "gated"):
        loopback_hub.add_repo("loopback/plain", repos["plain"], **{setup: True})
    elif setup != "none":
        serve(loopback_hub, repos, setup)
    out = tmp_path / "heads.csv"
    code, _, err = run(capsys, "analyze", model, "--no-null", "-o", str(out), "--cache-dir", str(tmp_path))
    assert code == 1 and err.count("\n") == 1 and needle in err, err
    assert not out.exists() and not list(tmp_path.glob("heads*"))


def test_private_and_gated_with_a_token(
    loopback_hub: Any, repos: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loopback_hub.add_repo("loopback/private", repos["plain"], private=True)
    loopback_hub.add_repo("loopback/gated", repos["plain"], gated=True)
    monkeypatch.setenv("HF_TOKEN", loopback_hub.token)
    local = qk.analyze(repos["plain"], null=False)
    for repo_id in ("loopback/private", "loopback/gated"):
        same_table(qk.analyze(repo_id, null=False, cache_dir=tmp_path), local)
    monkeypatch.setenv("HF_TOKEN", loopback_hub.other_token)
    with pytest.raises(qk.QKEnergyError, match="gated repository"):
        qk.analyze("loopback/gated", null=False, cache_dir=tmp_path / "other")


# ----------------------------------------------------------------------------- broken transfers


def test_a_connection_lost_mid_range_resumes(
    loopback_hub: Any, repos: dict[str, Path], tmp_path: Path
) -> None:
    serve(loopback_hub, repos, "plain")
    loopback_hub.cut("loopback/plain", "model.safetensors", after_bytes=3000, times=2)
    remote = qk.analyze("loopback/plain", null=False, cache_dir=tmp_path)
    same_table(remote, qk.analyze(repos["plain"], null=False))
    needed, files = floor(repos["plain"], remote)
    # the two cut responses' 3000 bytes were kept: the range resumed where each stopped
    assert loopback_hub.bytes_served <= 1.05 * needed + SLACK * files


def test_a_connection_that_keeps_dropping_is_one_line_and_a_rerun_resumes(
    loopback_hub: Any, repos: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    serve(loopback_hub, repos, "plain")
    loopback_hub.cut("loopback/plain", "model.safetensors", after_bytes=1000, times=50)
    out = tmp_path / "heads.csv"
    args = ("analyze", "loopback/plain", "--no-null", "-o", str(out), "--cache-dir", str(tmp_path / "c"))
    code, _, err = run(capsys, *args)
    assert code == 1 and err.count("\n") == 1, err
    assert "loopback/plain: model.safetensors: the connection was lost after" in err and "run again" in err
    assert not out.exists()
    served = loopback_hub.bytes_served
    loopback_hub.cut("loopback/plain", "model.safetensors", after_bytes=1000, times=0)
    loopback_hub.reset_counts()
    code, _, err = run(capsys, *args)
    assert code == 0 and out.exists(), err
    remote = qk.analyze("loopback/plain", null=False, cache_dir=tmp_path / "c")
    needed, files = floor(repos["plain"], remote)
    assert served + loopback_hub.bytes_served <= 1.05 * needed + SLACK * files + 4 * 1000


def test_a_server_error_is_one_line(
    loopback_hub: Any, repos: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    serve(loopback_hub, repos, "plain")
    loopback_hub.fail("loopback/plain", 404, times=100)
    code, _, err = run(capsys, "analyze", "loopback/plain", "--no-null", "--cache-dir", str(tmp_path))
    assert code == 1 and err.count("\n") == 1 and "loopback/plain" in err, err


# ----------------------------------------------------------------------------- the command line and the mirror


def test_cli_says_what_it_fetched_and_records_it(
    loopback_hub: Any, repos: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    serve(loopback_hub, repos, "sharded")
    out = tmp_path / "heads.csv"
    code, _, err = run(
        capsys, "analyze", "loopback/sharded", "--no-null", "-o", str(out), "--cache-dir", str(tmp_path / "c")
    )
    assert code == 0, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("fetched ") and "of loopback/sharded's" in line and "by byte range" in line
    assert str(tmp_path / "c" / "hub") in line
    settings = json.loads(Path(str(out) + ".meta.json").read_text())["settings"]
    assert settings["hub"]["bytes_fetched"] == loopback_hub.bytes_served


def test_the_mirror_is_never_read_as_a_checkpoint(
    loopback_hub: Any, repos: dict[str, Path], tmp_path: Path
) -> None:
    serve(loopback_hub, repos, "plain")
    remote = qk.analyze("loopback/plain", layers=[0], null=False, cache_dir=tmp_path)
    snapshot = Path(remote.settings["model_source"]["path"])
    assert (snapshot / "model.safetensors").is_file()
    with pytest.raises(qk.QKEnergyError, match="inside qkenergy's hub range cache"):
        qk.analyze(snapshot, null=False)
    # holes stay holes: far less disk than the file's size is used (where the file system keeps holes)
    stat = os.stat(snapshot / "model.safetensors")
    assert stat.st_size == (repos["plain"] / "model.safetensors").stat().st_size


# ----------------------------------------------------------------------------- surveys


def test_survey_of_hub_ids_equals_survey_of_local_copies(
    loopback_hub: Any, repos: dict[str, Path], tmp_path: Path
) -> None:
    import sqlite3

    from tests.survey_checkpoints import thread_cluster

    serve(loopback_hub, repos, "plain", "sharded")
    remote_manifest = tmp_path / "remote.toml"
    remote_manifest.write_text(
        '[[model]]\nsource = "loopback/plain"\nname = "a"\n[[model]]\nsource = "loopback/sharded"\nname = "b"\n'
    )
    local_manifest = tmp_path / "local.toml"
    local_manifest.write_text(
        f'[[model]]\nsource = "{repos["plain"]}"\nname = "a"\n[[model]]\nsource = "{repos["sharded"]}"\nname = "b"\n'
    )
    spec = qk.NullSpec(samples=50, seed=3)
    cache = tmp_path / "c"
    with thread_cluster() as scheduler:
        remote = qk.survey(remote_manifest, tmp_path / "r", null=spec, scheduler=scheduler, cache_dir=cache)
        fetched = loopback_hub.bytes_served
        loopback_hub.reset_counts()
        again = qk.survey(remote_manifest, tmp_path / "r2", null=spec, scheduler=scheduler, cache_dir=cache)
        local = qk.survey(local_manifest, tmp_path / "l", null=spec, scheduler=scheduler, cache_dir=cache)
    assert remote.ok and again.ok and local.ok
    assert loopback_hub.bytes_served == 0  # the workers shared the client's range cache
    columns = [c for c in remote.heads.columns if c != "source"]  # "hub" against "directory"
    for survey in (remote, again):
        pd.testing.assert_frame_equal(
            survey.heads[columns].sort_values(["model", "layer", "head"]).reset_index(drop=True),
            local.heads[columns].sort_values(["model", "layer", "head"]).reset_index(drop=True),
        )
    bound = 0.0
    for name in ("plain", "sharded"):
        needed, files = floor(repos[name], qk.analyze(repos[name], null=False))
        bound += 1.05 * needed + SLACK * files
    assert fetched <= bound
    with sqlite3.connect(tmp_path / "r" / "ledger.sqlite") as db:
        per_unit = [r[0] for r in db.execute("SELECT bytes_fetched FROM units")]
        paths = [r[0] for r in db.execute("SELECT path FROM models ORDER BY model")]
    # each unit records what it fetched (here nothing: files this small come whole with their headers)
    assert len(per_unit) == 7 and all(isinstance(b, int) for b in per_unit) and sum(per_unit) <= fetched
    assert all("@" in p and len(p.split("@")[1]) == 40 for p in paths)  # pinned to the commit resolved


def test_the_progress_bar_counts_the_bytes_the_layers_need(
    loopback_hub: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second bar's total is the bytes of the layers' query and key tensors not yet fetched, and
    what the fetches advance it by adds up to that total (tensors far larger than a header's first read)."""
    import contextlib

    from qkenergy.base import formatting
    from tests.survey_checkpoints import write_checkpoint

    folder = write_checkpoint(tmp_path / "big", layers=3, N=256, heads=4, head_dim=32)
    loopback_hub.add_repo("loopback/big", folder)
    tasks: dict[str, list[float]] = {}

    class Bar:
        def add_task(self, description: str, total: float) -> str:
            tasks[description] = [total, 0.0]
            return description

        def advance(self, task: str, amount: float = 1) -> None:
            tasks[task][1] += amount

        def update(self, task: str, total: float) -> None:
            tasks[task][0] = total

    monkeypatch.setattr(formatting, "progress_bar", lambda *a, **k: contextlib.nullcontext(Bar()))
    qk.analyze("loopback/big", layers=[1, 2], null=False, progress=True, cache_dir=tmp_path / "c")
    total, done = tasks["fetching from the Hub (MB)"]
    assert tasks["analysing layers"] == [2, 2]
    q_and_k = 2 * 2 * 4 * 32 * 256 * 4  # two layers, W_Q and W_K, float32
    assert total == pytest.approx(q_and_k / 1e6) and done == pytest.approx(total)


def test_a_wrong_shard_index_is_one_line(loopback_hub: Any, repos: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "wrong"
    shutil.copytree(repos["sharded"], folder)
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    query = "model.layers.0.self_attn.q_proj.weight"
    shards = sorted(set(index["weight_map"].values()))
    index["weight_map"][query] = next(s for s in shards if s != index["weight_map"][query])
    index_path.write_text(json.dumps(index))
    loopback_hub.add_repo("loopback/wrong", folder)
    with pytest.raises(qk.QKEnergyError, match=r"model.safetensors.index.json: maps tensor .* but it is"):
        qk.analyze("loopback/wrong", null=False, cache_dir=tmp_path / "c")


@pytest.mark.parametrize(
    ("sha", "path", "needle"),
    [
        ("a" * 40, "../../outside.safetensors", "which is not a path inside the repository"),
        ("a" * 40, "/etc/model.safetensors", "which is not a path inside the repository"),
        ("../../x", "model.safetensors", "expected 40 hexadecimal digits"),
    ],
)
def test_what_the_hub_answers_never_names_a_path_outside_the_cache(
    loopback_hub: Any, repos: dict[str, Path], tmp_path: Path, sha: str, path: str, needle: str
) -> None:
    """A hostile or broken hub's commit and file list name files of the range cache: both are checked."""
    serve(loopback_hub, repos, "plain")
    sibling = {"rfilename": path, "size": 10, "blobId": "b" * 40}
    loopback_hub.inject("loopback/plain", "listing", body={"sha": sha, "siblings": [sibling]})
    with pytest.raises(qk.QKEnergyError, match=needle):
        qk.analyze("loopback/plain", null=False, cache_dir=tmp_path / "c")
    assert not (tmp_path / "outside.safetensors").exists()
    assert not list((tmp_path / "c").rglob("*.safetensors"))
