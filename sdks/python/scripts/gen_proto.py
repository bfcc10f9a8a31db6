"""Regenerate the gRPC/protobuf stubs in src/troupe/_proto from ../../proto.

Usage: python scripts/gen_proto.py [OUT_DIR]

OUT_DIR defaults to src/troupe/_proto. The staleness test passes a temporary
directory and compares the result with the committed files byte for byte.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SDK_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = SDK_ROOT.parent.parent / "proto"
DEFAULT_OUT = SDK_ROOT / "src" / "troupe" / "_proto"
PACKAGE_PREFIX = "troupe._proto."

# protoc writes imports as `from troupe.v1 import x_pb2`, but `troupe` is the SDK
# package itself, so the generated modules live under troupe._proto and their
# imports are rewritten to match.
_IMPORT_RE = re.compile(r"^(from|import) troupe\.v1\b", re.MULTILINE)


def generate(out_dir: Path) -> list[Path]:
    """Run protoc into out_dir and return the written files (sorted)."""
    protos = sorted(p.relative_to(PROTO_ROOT).as_posix() for p in PROTO_ROOT.rglob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files under {PROTO_ROOT}")
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *protos,
    ]
    subprocess.run(cmd, check=True, cwd=PROTO_ROOT)
    written: list[Path] = []
    for path in sorted(out_dir.rglob("*")):
        if path.suffix not in (".py", ".pyi"):
            continue
        text = path.read_text()
        text = _IMPORT_RE.sub(lambda m: f"{m.group(1)} {PACKAGE_PREFIX}troupe.v1", text)
        path.write_text(text)
        written.append(path)
    # Package markers so the stubs import as regular packages.
    for pkg in {p.parent for p in written} | {out_dir}:
        d = pkg
        while True:
            init = d / "__init__.py"
            if not init.exists():
                init.write_text("")
            if d == out_dir:
                break
            d = d.parent
    return written


def main() -> None:
    out_dir = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else DEFAULT_OUT
    for path in generate(out_dir):
        print(path.relative_to(out_dir))


if __name__ == "__main__":
    main()
