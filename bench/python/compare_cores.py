"""The Python SDK on its pure-Python core (grpcio) and on its native core
(troupe._native), in one run: bench_sdk.py once per core, then one table.

    python bench/python/compare_cores.py [bench_sdk.py options]

Each run sets TROUPE_SDK_CORE for the load process and the app process alike
(the SDK on both sides), against a fresh daemon ($TROUPE_BIN). The runs take
turns on the same machine, so the figures compare; absolute ones move with
whatever else runs there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).with_name("bench_sdk.py")
CORES = [("python", "before (grpcio)"), ("native", "after (native)")]
COLUMNS = ["calls/s", "p50 ms", "p99 ms", "app µs", "client µs", "daemon µs"]


def run(core: str, extra: list[str], out: Path) -> list[dict[str, str]]:
    env = {**os.environ, "TROUPE_SDK_CORE": core}
    cmd = [sys.executable, str(BENCH), "--json", str(out), *extra]
    subprocess.run(cmd, env=env, check=True)
    rows: list[dict[str, str]] = json.loads(out.read_text())
    return rows


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="troupe-cores-") as tmp:
        results = {core: run(core, sys.argv[1:], Path(tmp, f"{core}.json")) for core, _ in CORES}
    header = ["scenario", "core", *COLUMNS[:3]]
    header += ["app CPU µs/call", "client CPU µs/call", "daemon CPU µs/call"]
    rows = [header]
    for i, before in enumerate(results["python"]):
        for core, label in CORES:
            r = results[core][i]
            rows.append(
                [before["scenario"] if core == "python" else "", label, *(r[c] for c in COLUMNS)]
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    print()
    for n, row in enumerate(rows):
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        if n == 0:
            print("-+-".join("-" * w for w in widths))


if __name__ == "__main__":
    main()
