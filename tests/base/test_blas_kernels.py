"""The command line's choice of OpenBLAS kernels (qkenergy.base.blas_kernels) and its record in the settings."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from qkenergy.base.blas_kernels import VARIABLE, choose_openblas_kernels, first_processor, preferred_kernels
from qkenergy.base.parallel import blas_libraries

SRC = Path(__file__).resolve().parents[2] / "src"


def cpuinfo(vendor: str, family: int, flags: str, processors: int = 2) -> str:
    entry = (
        "processor\t: {k}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: 17\n"
        "model name\t: test CPU\nflags\t\t: fpu sse2 avx avx2 fma {flags}\n\n"
    )
    return "".join(entry.format(k=k, vendor=vendor, family=family, flags=flags) for k in range(processors))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (cpuinfo("AuthenticAMD", 25, "avx512f avx512bw avx512_bf16"), "Haswell"),  # Zen 4
        (cpuinfo("AuthenticAMD", 25, "vaes"), None),  # Zen 3: no AVX-512, AVX2 kernels already
        (cpuinfo("AuthenticAMD", 26, "avx512f avx512bw"), None),  # Zen 5: full-width AVX-512
        (cpuinfo("GenuineIntel", 6, "avx512f avx512bw"), None),
        (cpuinfo("AuthenticAMD", 25, "avx512fx"), None),  # whole flags only
        ("", None),
    ],
)
def test_preferred_kernels_reads_vendor_family_and_flags(text: str, expected: str | None) -> None:
    assert preferred_kernels(text) == expected


def test_only_the_first_processor_counts() -> None:
    first_zen3 = cpuinfo("AuthenticAMD", 25, "vaes", processors=1) + cpuinfo("AuthenticAMD", 25, "avx512f")
    assert preferred_kernels(first_zen3) is None


def test_choose_sets_the_variable_only_where_nothing_has_chosen(tmp_path: Path) -> None:
    zen4 = tmp_path / "cpuinfo"
    zen4.write_text(cpuinfo("AuthenticAMD", 25, "avx512f"))
    environ: dict[str, str] = {}
    assert choose_openblas_kernels(environ, zen4, loaded=()) == "Haswell"
    assert environ == {VARIABLE: "Haswell"}
    for users in ({VARIABLE: "SkylakeX"}, {VARIABLE: ""}):  # a user's choice, even empty, stands
        assert choose_openblas_kernels(users, zen4, loaded=()) is None
        assert users[VARIABLE] in ("SkylakeX", "")
    too_late: dict[str, str] = {}  # numpy loaded: its OpenBLAS has chosen already
    assert choose_openblas_kernels(too_late, zen4, loaded={"numpy"}) is None
    assert too_late == {}
    unreadable: dict[str, str] = {}
    assert choose_openblas_kernels(unreadable, tmp_path / "missing", loaded=()) is None
    assert unreadable == {}


def test_blas_libraries_name_the_loaded_blas() -> None:
    libraries = blas_libraries()
    assert libraries and all(isinstance(name, str) and name for name in libraries)
    assert len(set(libraries)) == len(libraries)


def recorded_blas(tmp_path: Path, coretype: str | None) -> list[str]:
    """The ``blas`` setting of a ``qkenergy analyze`` run (the console script's path) with OPENBLAS_CORETYPE."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "OPENBLAS_NUM_THREADS": "1"}
    env.pop(VARIABLE, None)
    if coretype is not None:
        env[VARIABLE] = coretype
    table = tmp_path / f"t{coretype}.csv"
    cmd = [
        sys.executable,
        "-m",
        "qkenergy",
        "analyze",
        "--layers",
        "0",
        "--no-null",
        "--quiet",
        "-o",
        str(table),
    ]
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    settings = json.loads(Path(f"{table}.meta.json").read_text())["settings"]
    return list(settings["blas"])


openblas_x86 = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64")
    or not any(n.startswith("openblas") for n in blas_libraries()),
    reason="OpenBLAS's x86 kernels only",
)


@openblas_x86
def test_the_command_line_asks_for_this_cpus_kernels_and_records_them(tmp_path: Path) -> None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    here = preferred_kernels(text)
    recorded = [name for name in recorded_blas(tmp_path, None) if name.startswith("openblas")]
    assert recorded
    if here is not None:
        assert all(f"({here} kernels)" in name for name in recorded), recorded
    # a user's choice wins over the command line's (SkylakeX needs AVX-512, Haswell AVX2)
    flags = first_processor(text).get("flags", "").split()
    users = "SkylakeX" if here is not None else "Haswell" if "avx2" in flags else None
    if users is not None:
        chosen = [name for name in recorded_blas(tmp_path, users) if name.startswith("openblas")]
        assert chosen and all(f"({users} kernels)" in name for name in chosen), chosen
