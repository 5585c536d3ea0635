"""Hub reading against servers that lie, stall or break (the loopback hub's fault injection).

Each refusal is one line naming the repository or file and what was wrong, exit status 1, no
output written and nothing recorded in the range cache from the answer refused; the honest run
that follows equals the local analysis of the same files. The time bounds are set to 1 s here
(``QKENERGY_HUB_TIMEOUT``), the waits between tries recorded instead of slept.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import qkenergy as qk
from tests.cli.test_commands import run

pytest.importorskip("huggingface_hub")

REPO = "loopback/big"
WEIGHTS = "model.safetensors"


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    """A llama checkpoint whose tensors (128 kB each) lie beyond the header's first 64 KiB read, and its
    local analysis."""
    from tests.survey_checkpoints import write_checkpoint

    folder = write_checkpoint(tmp_path_factory.mktemp("big") / "big", layers=2, N=256, heads=4, head_dim=32)
    return folder, qk.analyze(folder, null=False).heads.drop(columns="model")


@pytest.fixture
def hub(loopback_hub: Any, big: tuple[Path, pd.DataFrame], monkeypatch: pytest.MonkeyPatch) -> Any:
    """The loopback hub serving ``loopback/big``; bounds of 1 s; waits recorded in ``hub.waits``."""
    from qkenergy.weights import hub as hub_module

    loopback_hub.commit = loopback_hub.add_repo(REPO, big[0])
    for variable in ("QKENERGY_HUB_TIMEOUT", "QKENERGY_HUB_LOCK_TIMEOUT"):
        monkeypatch.setenv(variable, "1")
    monkeypatch.setenv("QKENERGY_HUB_MAX_WAIT", "5")
    loopback_hub.waits = []
    monkeypatch.setattr(hub_module, "_sleep", loopback_hub.waits.append)
    return loopback_hub


def honest(big: tuple[Path, pd.DataFrame], cache: Path, model: str = REPO) -> qk.Analysis:
    """A run with nothing injected: its table equals the local analysis."""
    remote = qk.analyze(model, null=False, cache_dir=cache)
    pd.testing.assert_frame_equal(remote.heads.drop(columns="model"), big[1])
    return remote


def refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, needle: str, model: str = REPO) -> str:
    """analyze MODEL: one line holding ``needle``, exit 1, no output; the line."""
    out = tmp_path / "heads.csv"
    code, _, err = run(
        capsys, "analyze", model, "--no-null", "-o", str(out), "--cache-dir", str(tmp_path / "c")
    )
    assert code == 1 and err.count("\n") == 1 and needle in err, err
    assert model.split("@")[0] in err or "hub" in err, err  # the repository, or the range cache
    assert not out.exists() and not list(tmp_path.glob("heads*"))
    return err


def recorded(cache: Path, path: str, repo_id: str = "") -> list[tuple[int, int]]:
    """The ranges of ``path`` (of ``repo_id``, where given) the range cache records."""
    with sqlite3.connect(cache / "hub" / "ranges.sqlite") as db:
        rows = db.execute(
            "SELECT begin, end FROM ranges JOIN files ON files.id = ranges.file WHERE key LIKE ? ORDER BY begin",
            (f"%{repo_id}%/{path}",),
        ).fetchall()
    return [(int(a), int(b)) for a, b in rows]


# ----------------------------------------------------------------------------- range answers that lie


@pytest.mark.parametrize(
    ("kind", "options", "needle"),
    [
        ("shift", {"by": 4096}, "the server answered bytes "),
        ("from_zero", {}, "the server answered bytes 0-"),
        ("multipart", {}, "multipart/byteranges"),
        ("gzip", {}, "with a 'gzip'-encoded body"),
        ("total", {"total": 123}, "the server says the file has 123 bytes; its listing says"),
        (
            "etag",
            {"etag": "e" * 64},
            f"the file changed on the server during the run: ETag '{'e' * 64}', listed",
        ),
    ],
)
def test_a_range_answer_that_contradicts_the_request_or_listing_is_refused_unrecorded(
    hub: Any,
    big: tuple[Path, pd.DataFrame],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    options: dict[str, Any],
    needle: str,
) -> None:
    # the header's first read is answered honestly; the first tensor's range is not
    hub.inject(REPO, kind, path=WEIGHTS, after=1, **options)
    err = refused(capsys, tmp_path, needle)
    assert f"{REPO}: {WEIGHTS}: " in err and "nothing was kept" in err
    assert recorded(tmp_path / "c", WEIGHTS) == [(0, 64 << 10)]  # the header's read only
    if kind in ("shift", "from_zero"):
        assert "for a request of " in err
    honest(big, tmp_path / "c")


def test_a_short_honest_answer_goes_on_where_it_ended(
    hub: Any, big: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    """A server that serves 8 kB pieces with an honest Content-Range: each piece asks for the rest."""
    hub.inject(REPO, "short", path=WEIGHTS, times=1000, piece=8000)
    honest(big, tmp_path / "c")
    pieces = [r for r in hub.log if r.listener == "cdn"]
    assert len(pieces) > 20 and hub.waits == []  # no try counted, no wait


def test_a_whole_file_answer_to_a_range_request_is_refused(
    hub: Any, big: tuple[Path, pd.DataFrame], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hub.inject(REPO, "status", path=WEIGHTS, status=200, after=1)
    refused(capsys, tmp_path, "the server answered HTTP 200 to a request for bytes ")
    honest(big, tmp_path / "c")


# ----------------------------------------------------------------------------- file lists that lie


def _listing(hub: Any, folder: Path, **change: Any) -> dict[str, Any]:
    """The Hub's model_info answer for ``loopback/big`` (blobs), with ``change`` applied to its first file."""
    import hashlib

    siblings = []
    for path in sorted(p.name for p in folder.iterdir()):
        data = (folder / path).read_bytes()
        sibling: dict[str, Any] = {"rfilename": path, "size": len(data)}
        sibling["blobId"] = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        if path.endswith(".safetensors"):  # an LFS file: its ETag is its SHA-256
            sibling["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        siblings.append(sibling)
    siblings[0].update(change)
    for key in [k for k, v in change.items() if v is None]:
        del siblings[0][key]
    return {"sha": hub.commit, "siblings": siblings}


@pytest.mark.parametrize(
    ("body", "content_type", "needle"),
    [
        ("<html><body>Log in to the hotel Wi-Fi</body></html>", "text/html", "not JSON (a login or captive"),
        ("[1, 2]", "application/json", "expected a JSON object, got list"),
        (
            '{"sha": "' + "a" * 40 + '", "siblings": "config.json"}',
            "application/json",
            "expected a list of files",
        ),
        ('{"sha": "' + "a" * 40 + '", "siblings": ["config.json"]}', "application/json", "file 0 is str"),
        ('{"sha": "../../x", "siblings": []}', "application/json", "expected 40 hexadecimal digits"),
        ("{not json", "application/json", "is not valid UTF-8 JSON"),
    ],
)
def test_a_malformed_file_list_is_one_line(
    hub: Any,
    big: tuple[Path, pd.DataFrame],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    body: str,
    content_type: str,
    needle: str,
) -> None:
    hub.inject(REPO, "listing", body=body, content_type=content_type)
    refused(capsys, tmp_path, needle)
    honest(big, tmp_path / "c")


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"size": "12abc"}, "has size '12abc'; expected a non-negative integer"),
        ({"size": -5}, "has size -5; expected a non-negative integer"),
        ({"size": None}, "has size null; expected a non-negative integer"),
        ({"rfilename": None}, "file 0 has no path"),
        ({"rfilename": "../../outside.safetensors"}, "which is not a path inside the repository"),
        ({"rfilename": "/etc/model.safetensors"}, "which is not a path inside the repository"),
        ({"blobId": None}, "has ETag null; expected a git blob id or SHA-256"),
    ],
)
def test_a_file_list_field_of_the_wrong_kind_is_one_line(
    hub: Any,
    big: tuple[Path, pd.DataFrame],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: dict[str, Any],
    needle: str,
) -> None:
    hub.inject(REPO, "listing", body=_listing(hub, big[0], **change))
    refused(capsys, tmp_path, needle)
    assert not (tmp_path / "outside.safetensors").exists()
    assert not list((tmp_path / "c").rglob("*.safetensors"))
    honest(big, tmp_path / "c")


def test_a_listed_size_other_than_the_files_is_refused_at_its_first_range(
    hub: Any, big: tuple[Path, pd.DataFrame], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    size = (big[0] / WEIGHTS).stat().st_size
    listing = _listing(hub, big[0])
    row = next(s for s in listing["siblings"] if s["rfilename"] == WEIGHTS)
    row["size"] = size + 1000
    hub.inject(REPO, "listing", body=listing)
    refused(capsys, tmp_path, f"the server says the file has {size} bytes; its listing says {size + 1000}")
    honest(big, tmp_path / "c")


# ----------------------------------------------------------------------------- statuses, redirects, retries


def test_a_transient_503_on_the_file_list_is_retried(
    hub: Any, big: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    hub.inject(REPO, "status", status=503)
    honest(big, tmp_path / "c")
    assert hub.waits == [0.5]


def test_429_waits_for_retry_after_within_the_bound(
    hub: Any, big: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    hub.inject(REPO, "status", path=WEIGHTS, status=429, headers={"Retry-After": "2"}, times=2)
    honest(big, tmp_path / "c")
    assert hub.waits == [2.0, 2.0]


@pytest.mark.parametrize(
    ("path", "status", "headers", "times", "needle"),
    [
        (
            None,
            429,
            {"Retry-After": "86400"},
            1,
            "asked to wait 86400 s before retrying, more than QKENERGY_HUB_MAX_WAIT=5 s",
        ),
        (WEIGHTS, 429, {"Retry-After": "86400"}, 1, "asked to wait 86400 s before retrying"),
        (WEIGHTS, 500, {}, 4, f"the Hub answered HTTP 500 for {WEIGHTS} (4 tries)"),
        (WEIGHTS, 502, {}, 4, f"the Hub answered HTTP 502 for {WEIGHTS} (4 tries)"),
        (None, 503, {}, 4, "the Hub answered HTTP 503 for its file list (4 tries)"),
        (None, 429, {}, 4, "the Hub answered HTTP 429 (too many requests) for its file list (4 tries)"),
    ],
)
def test_statuses_are_named_after_the_retries(
    hub: Any,
    big: tuple[Path, pd.DataFrame],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    path: str | None,
    status: int,
    headers: dict[str, str],
    times: int,
    needle: str,
) -> None:
    hub.inject(REPO, "status", path=path, status=status, headers=headers, times=times)
    err = refused(capsys, tmp_path, needle)
    assert "Retrying" not in err and "HTTP Error" not in err  # huggingface_hub's retry warnings stay off
    assert len(hub.waits) == (times - 1 if times > 1 else 0)
    honest(big, tmp_path / "c")


@pytest.mark.parametrize(
    ("location", "needle"),
    [
        (None, "redirected the request more than 20 times (a redirect loop)"),
        ("http://127.0.0.1:1/nowhere", "ConnectError from 127.0.0.1:1"),
    ],
)
def test_redirects_that_loop_or_lead_nowhere(
    hub: Any,
    big: tuple[Path, pd.DataFrame],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    location: str | None,
    needle: str,
) -> None:
    options = {} if location is None else {"location": location}
    hub.inject(REPO, "redirect", path=WEIGHTS, times=30, **options)
    refused(capsys, tmp_path, needle)
    hub.inject(REPO, "redirect", path=WEIGHTS, times=0)  # the rest of the faults cleared
    hub._faults.clear()
    honest(big, tmp_path / "c")


# ----------------------------------------------------------------------------- time bounds


@pytest.mark.parametrize(
    ("path", "kind", "options", "needle"),
    [
        (None, "stall", {}, "its file list: no answer from 127.0.0.1:"),
        (WEIGHTS, "stall", {}, "no answer from 127.0.0.1:"),
        (WEIGHTS, "hang", {"after": 1}, "no answer from 127.0.0.1:"),
        (WEIGHTS, "trickle", {"after": 1, "delay": 0.1}, "slower than QKENERGY_HUB_MIN_RATE=16384 bytes/s"),
    ],
)
def test_stalls_and_trickles_end_within_the_bound(
    hub: Any,
    big: tuple[Path, pd.DataFrame],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    path: str | None,
    kind: str,
    options: dict[str, Any],
    needle: str,
) -> None:
    hub.inject(REPO, kind, path=path, **options)
    started = time.monotonic()
    err = refused(capsys, tmp_path, needle)
    assert time.monotonic() - started < 6, "the bound is 1 s (and a trickle's first second)"
    if kind != "trickle":
        assert "within 1 s (QKENERGY_HUB_TIMEOUT sets the bound)" in err
    honest(big, tmp_path / "c")


def test_bounds_are_checked_where_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from qkenergy.weights.hub import HubBounds

    monkeypatch.setenv("QKENERGY_HUB_MIN_RATE", "2048")
    assert HubBounds.from_environment() == HubBounds(min_rate=2048.0)
    for text in ("0", "-1", "inf", "nan", "fast"):
        monkeypatch.setenv("QKENERGY_HUB_TIMEOUT", text)
        with pytest.raises(qk.QKEnergyError, match="QKENERGY_HUB_TIMEOUT must be a positive finite number"):
            HubBounds.from_environment()


def test_docs_hub_md_gives_each_bound_its_variable_and_default() -> None:
    import dataclasses
    import re

    from qkenergy.weights.hub import BOUND_VARIABLES, HubBounds

    text = (Path(__file__).resolve().parents[2] / "docs" / "hub.md").read_text()
    rows = dict(re.findall(r"^\| `(QKENERGY_HUB_[A-Z_]+)` \| ([0-9.]+) ", text, re.MULTILINE))
    defaults = {f.name: f.default for f in dataclasses.fields(HubBounds)}
    assert rows == {variable: f"{defaults[name]:g}" for name, variable in BOUND_VARIABLES.items()}


# ----------------------------------------------------------------------------- headers bounded by the evidence


def test_a_huge_header_that_is_not_json_is_refused_after_the_first_read(
    hub: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "huge-header"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    length = 99_000_000
    with open(folder / WEIGHTS, "wb") as fh:
        fh.write(length.to_bytes(8, "little") + b"\x00not json at all")
        fh.truncate(8 + length + 16)  # a hole: no disk used
    hub.add_repo("loopback/huge-header", folder)
    hub.reset_counts()
    refused(capsys, tmp_path, "its header does not start as a JSON object (byte 0x00", "loopback/huge-header")
    assert hub.served[("loopback/huge-header", WEIGHTS)] == 64 << 10


def test_a_gguf_header_past_the_bound_is_refused(
    hub: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GGUF array of 2^29 empty strings in a file listed at 4 GiB: refused at once, nothing walked."""
    import struct

    from qkenergy.weights import hub as hub_module

    monkeypatch.setattr(hub_module, "GGUF_HEADER_LIMIT", 1 << 20)
    folder = tmp_path / "vocab"
    folder.mkdir()
    key = b"tokenizer.ggml.tokens"
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
    head += struct.pack("<IIQ", 9, 8, 1 << 29)  # an array of strings, 2^29 of them
    with open(folder / "vocab.gguf", "wb") as fh:
        fh.write(head)
        fh.truncate(len(head) + 8 * (1 << 29) + 64)  # each string empty: 8 zero bytes of length
    hub.add_repo("loopback/vocab", folder)
    hub.reset_counts()
    refused(
        capsys,
        tmp_path,
        "(536870912 items, at least 4294967296 bytes) runs past byte 100000000",
        "loopback/vocab",
    )
    assert hub.served[("loopback/vocab", "vocab.gguf")] <= 64 << 10


# ----------------------------------------------------------------------------- the range cache damaged


def _online_then_offline(
    hub: Any, big: tuple[Path, pd.DataFrame], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    honest(big, tmp_path / "c")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "c" / "hub" / "models" / REPO / "commits" / f"{hub.commit}.json"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("garbage", "the stored file list is not valid UTF-8 JSON"),
        ('{"path": "config.json"}', "expected a list of files, got dict"),
        ('[{"path": "config.json", "etag": "' + "a" * 40 + '"}]', "has size null"),
    ],
)
def test_a_damaged_stored_file_list_is_one_line_offline(
    hub: Any,
    big: tuple[Path, pd.DataFrame],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    needle: str,
) -> None:
    listing = _online_then_offline(hub, big, tmp_path, monkeypatch)
    good = listing.read_text()
    listing.write_text(text)
    err = refused(capsys, tmp_path, needle)
    assert "delete it and run online" in err
    listing.write_text(good)
    honest(big, tmp_path / "c")


@pytest.mark.parametrize("escape", ["../../../../../outside.txt", "../../../../../../victim.txt"])
def test_a_stored_path_edited_to_leave_the_cache_touches_nothing_outside(
    hub: Any,
    big: tuple[Path, pd.DataFrame],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    escape: str,
) -> None:
    import json

    listing = _online_then_offline(hub, big, tmp_path, monkeypatch)
    victim = tmp_path / "victim.txt"
    victim.write_text("a file of the user's")
    rows = json.loads(listing.read_text())
    for row in rows:
        if row["path"] == "config.json":
            row["path"] = escape
    listing.write_text(json.dumps(rows))
    refused(capsys, tmp_path, "which is not a path inside the repository")
    assert victim.read_text() == "a file of the user's" and not (tmp_path / "outside.txt").exists()
    # the cache itself refuses such a key, whoever asks
    from qkenergy.weights.range_cache import RangeCache

    cache = RangeCache(tmp_path / "c" / "hub")
    try:
        with pytest.raises(qk.QKEnergyError, match="not a path inside the hub range cache"):
            cache.file("models/x/" + escape, 10, "e", None)
    finally:
        cache.close()
    assert victim.read_text() == "a file of the user's"


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_a_lost_sparse_file_drops_its_ranges_once_and_is_fetched_again(
    hub: Any, big: tuple[Path, pd.DataFrame], tmp_path: Path, damage: str
) -> None:
    from qkenergy.weights.range_cache import RangeCacheNote

    honest(big, tmp_path / "c")
    mirror = tmp_path / "c" / "hub" / "models" / REPO / "snapshots" / hub.commit / WEIGHTS
    if damage == "deleted":
        mirror.unlink()
    else:
        with open(mirror, "r+b") as fh:
            fh.truncate(1000)
    hub.reset_counts()
    with pytest.warns(RangeCacheNote, match="was missing or cut short") as notes:
        honest(big, tmp_path / "c")
    assert len(notes) == 1 and hub.served[(REPO, WEIGHTS)] > 0
    hub.reset_counts()
    honest(big, tmp_path / "c")  # repaired: nothing fetched, nothing said
    assert hub.bytes_served == 0


def test_a_full_disk_names_the_cache_and_keeps_what_was_fetched(
    hub: Any,
    big: tuple[Path, pd.DataFrame],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import errno
    import os

    from qkenergy.weights import range_cache

    writes, original = [], os.pwrite

    def pwrite(fd: int, data: Any, at: int) -> int:
        if at > 64 << 10:  # the header's first read lands; the tensors' do not
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        writes.append(at)
        return original(fd, data, at)

    monkeypatch.setattr(range_cache.os, "pwrite", pwrite)
    err = refused(capsys, tmp_path, "no space left on the device")
    assert (
        WEIGHTS in err and str(tmp_path / "c" / "hub") in err and "the ranges fetched before are kept" in err
    )
    monkeypatch.undo()
    monkeypatch.setenv("QKENERGY_HUB_TIMEOUT", "1")
    kept = recorded(tmp_path / "c", WEIGHTS)
    assert kept and writes
    hub.reset_counts()
    honest(big, tmp_path / "c")
    assert not any(r.range == f"bytes=0-{(64 << 10) - 1}" for r in hub.log)  # the header was kept


def test_a_full_disk_on_the_stored_file_list_leaves_no_temporary_file(
    hub: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import os

    def replace(source: Any, target: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    from qkenergy.weights import hub as hub_module

    monkeypatch.setattr(hub_module.os, "replace", replace)
    refused(capsys, tmp_path, "cannot write to the hub range cache (No space left on device)")
    assert not [p for p in (tmp_path / "c").rglob("*") if p.name.endswith(".tmp")]


def test_a_record_locked_too_long_is_one_line(
    hub: Any, big: tuple[Path, pd.DataFrame], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    honest(big, tmp_path / "c")
    db = sqlite3.connect(tmp_path / "c" / "hub" / "ranges.sqlite", isolation_level=None)
    try:
        db.execute("BEGIN EXCLUSIVE")
        started = time.monotonic()
        err = refused(capsys, tmp_path, "the hub range cache is locked by another process for more than 1 s")
        assert "QKENERGY_HUB_LOCK_TIMEOUT" in err and "ranges.sqlite" in err
        assert time.monotonic() - started < 5
    finally:
        db.execute("ROLLBACK")
        db.close()
    honest(big, tmp_path / "c")


_FIRST_USE = """
import sys
from pathlib import Path
from qkenergy.weights.range_cache import RangeCache
sys.stdin.read()  # all start together
cache = RangeCache(Path(sys.argv[1]))
mirror = cache.file("models/o/n/snapshots/c/w.bin", 100, "e", lambda a, b: iter([bytes(range(a, b))]))
mirror.ensure(0, 100)
print(mirror.file_id)
"""


def test_concurrent_first_use_by_several_processes_is_safe(tmp_path: Path) -> None:
    """Three processes make one file's row at once: one insert, each reads the same row and the bytes."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _FIRST_USE, str(tmp_path / "hub")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for _ in range(3)
    ]
    answers = [p.communicate("go") for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], answers
    assert {out.strip() for out, _ in answers} == {"1"}
    assert (tmp_path / "hub" / "models/o/n/snapshots/c/w.bin").read_bytes() == bytes(range(100))


# ----------------------------------------------------------------------------- secrets


def test_a_password_in_hf_endpoint_is_never_written_or_shown(
    hub: Any,
    caplog: pytest.LogCaptureFixture,
    big: tuple[Path, pd.DataFrame],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from huggingface_hub import constants

    secret = hub.url.replace("http://", "http://reader:s3cret-pass@")
    monkeypatch.setenv("HF_ENDPOINT", secret)
    monkeypatch.setattr(constants, "ENDPOINT", secret)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", secret + "/{repo_id}/resolve/{revision}/{filename}"
    )
    out = tmp_path / "heads.csv"
    with caplog.at_level(logging.DEBUG):  # httpx2 logs each request's URL
        code, _, err = run(
            capsys, "analyze", REPO, "--no-null", "-o", str(out), "--cache-dir", str(tmp_path / "c")
        )
    assert code == 0, err
    assert "127.0.0.1" in caplog.text and "s3cret" not in caplog.text, {r.name for r in caplog.records}
    assert any(r.name.startswith("httpx") and "127.0.0.1" in r.getMessage() for r in caplog.records)
    assert [r for r in hub.log if r.listener == "hub"] and all(
        r.authorized for r in hub.log if r.listener == "hub"
    )
    written = [
        p.read_text(errors="replace") for p in [*tmp_path.glob("heads*"), *(tmp_path / "c").rglob("*.json")]
    ]
    assert written and not any("s3cret" in text for text in [err, *written])
    assert any("***@127.0.0.1" in text for text in written)
    (tmp_path / "again").mkdir()
    err = refused(capsys, tmp_path / "again", "no such repository on http://***@127.0.0.1", "loopback/absent")
    assert "s3cret" not in err


def test_a_folder_of_the_cache_linked_elsewhere_is_never_written_through(
    hub: Any, big: tuple[Path, pd.DataFrame], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shared cache whose repository folder was replaced by a link to another place."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    models = tmp_path / "c" / "hub" / "models" / "loopback"
    models.mkdir(parents=True)
    (models / "big").symlink_to(elsewhere)
    refused(capsys, tmp_path, "leads outside the hub range cache")
    assert list(elsewhere.iterdir()) == []
    (models / "big").unlink()
    honest(big, tmp_path / "c")


def test_a_file_list_falsely_said_to_be_gzip_is_one_line(
    hub: Any, big: tuple[Path, pd.DataFrame], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hub.inject(
        REPO, "status", status=200, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}
    )
    refused(capsys, tmp_path, "its file list: the answer cannot be read (DecodingError)")
    honest(big, tmp_path / "c")


def test_a_hub_out_of_reach_is_one_line_that_names_the_offline_mode(
    hub: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/hub.md's row "the Hub out of reach": nothing listens on port 1 of 127.0.0.1."""
    from huggingface_hub import constants

    nowhere = "http://127.0.0.1:1"
    monkeypatch.setenv("HF_ENDPOINT", nowhere)
    monkeypatch.setattr(constants, "ENDPOINT", nowhere)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", nowhere + "/{repo_id}/resolve/{revision}/{filename}"
    )
    err = refused(capsys, tmp_path, "the connection failed 4 times (ConnectError")
    assert "HF_HUB_OFFLINE=1" in err and len(hub.waits) == 3, (err, hub.waits)
