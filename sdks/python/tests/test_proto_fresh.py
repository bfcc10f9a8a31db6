"""The committed stubs in src/troupe/_proto must match what scripts/gen_proto.py generates."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SDK_ROOT = Path(__file__).resolve().parent.parent
COMMITTED = SDK_ROOT / "src" / "troupe" / "_proto"


def _load_generator() -> object:
    spec = importlib.util.spec_from_file_location(
        "gen_proto", SDK_ROOT / "scripts" / "gen_proto.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_proto"] = module
    spec.loader.exec_module(module)
    return module


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.suffix in (".py", ".pyi")
    }


def test_generated_stubs_are_fresh(tmp_path: Path) -> None:
    gen = _load_generator()
    gen.generate(tmp_path)  # type: ignore[attr-defined]
    fresh = _files(tmp_path)
    committed = _files(COMMITTED)
    assert fresh, "the generator wrote nothing"
    stale = sorted(
        name for name in fresh.keys() | committed.keys() if fresh.get(name) != committed.get(name)
    )
    assert not stale, (
        f"stubs out of date with proto/: {stale}; run `python scripts/gen_proto.py` in sdks/python"
    )
