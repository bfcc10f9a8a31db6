"""The SDK's PEP 517 build backend: maturin's, plus the daemon in the wheel.

maturin builds the SDK with its native core, ``troupe._native`` (pyo3
bindings). A wheel (``pip install ./sdks/python``, ``pip wheel``,
``scripts/package``) also carries the ``troupe`` daemon, built here with cargo
in the same profile, as the data script ``troupe-VERSION.data/scripts/troupe``:
pip installs it next to ``python``, where ``troupe.daemon_path()`` looks. One
maturin project cannot build both a pyo3 module and a binary, hence this step.
An editable install builds the native core only (its tests run ``$TROUPE_BIN``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import maturin

build_sdist = maturin.build_sdist
build_editable = maturin.build_editable
get_requires_for_build_wheel = maturin.get_requires_for_build_wheel
get_requires_for_build_sdist = maturin.get_requires_for_build_sdist
prepare_metadata_for_build_wheel = maturin.prepare_metadata_for_build_wheel

# sdks/python/build_backend/ -> the repository, where the workspace is.
_REPO = Path(__file__).resolve().parents[3]


def build_wheel(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    name: str = maturin.build_wheel(wheel_directory, config_settings, metadata_directory)
    profile = _profile(maturin.get_maturin_pep517_args(config_settings))
    daemon = _build_daemon(profile)
    _add_script(Path(wheel_directory) / name, daemon, "troupe")
    return name


def _profile(args: list[str]) -> str:
    """The cargo profile maturin builds the native core in (release unless
    ``--profile`` says otherwise), for the daemon to match."""
    for i, arg in enumerate(args):
        if arg == "--profile" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--profile="):
            return arg.split("=", 1)[1]
    return "release"


def _build_daemon(profile: str) -> Path:
    cargo = shutil.which("cargo")
    if cargo is None:
        raise RuntimeError(
            "building the troupe wheel from source needs cargo (Rust) for the daemon; "
            "install Rust (https://rustup.rs) or install a published wheel"
        )
    print(f"Building the troupe daemon (cargo, profile {profile})", flush=True)
    subprocess.run(
        [cargo, "build", "--profile", profile, "-p", "troupe", "--bin", "troupe"],
        cwd=_REPO,
        check=True,
    )
    meta = subprocess.run(
        [cargo, "metadata", "--format-version", "1", "--no-deps"],
        cwd=_REPO,
        check=True,
        capture_output=True,
    )
    target = Path(json.loads(meta.stdout)["target_directory"])
    binary = target / ("debug" if profile == "dev" else profile) / "troupe"
    if not binary.is_file():
        raise RuntimeError(f"cargo built the daemon but {binary} is missing")
    return binary


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def _add_script(wheel: Path, binary: Path, script: str) -> None:
    """Rewrites ``wheel`` with ``binary`` as a data script, stripped of debug
    info as maturin strips the extension, and its line in RECORD."""
    with tempfile.TemporaryDirectory() as tmp:
        stripped = Path(tmp) / script
        shutil.copy2(binary, stripped)
        if shutil.which("strip"):
            subprocess.run(["strip", "--strip-debug", str(stripped)], check=True)
        data = stripped.read_bytes()
        # name-version-tags.whl: its .data and .dist-info are name-version.
        dist = "-".join(wheel.name.split("-")[:2])
        arcname = f"{dist}.data/scripts/{script}"
        record = f"{dist}.dist-info/RECORD"
        rewritten = Path(tmp) / wheel.name
        with (
            zipfile.ZipFile(wheel) as src,
            zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as dst,
        ):
            items = src.infolist()
            # The .dist-info last, as the wheel format recommends.
            for item in (i for i in items if not i.filename.startswith(f"{dist}.dist-info/")):
                dst.writestr(item, src.read(item))
            info = zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o100755 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(info, data)
            for item in (i for i in items if i.filename.startswith(f"{dist}.dist-info/")):
                content = src.read(item)
                if item.filename == record:
                    line = f"{arcname},{_record_hash(data)},{len(data)}\n"
                    content = content.decode().replace(f"{record},,", line + f"{record},,").encode()
                dst.writestr(item, content)
        os.replace(rewritten, wheel)
