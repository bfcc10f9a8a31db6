"""Reads bench/transport.sh's cells and prints them: one line per cell as it
ends (--cell), and the whole table at the end (--table), with every cell as
a JSON line in a results file.

  transport_table.py --cell CELL_BASE LINK_BYTES
  transport_table.py --table WORK_DIR LINK_BYTES RATE QUEUE_MS RESULTS_FILE

A cell is CELL_BASE.{meta,out,err,rc}: meta holds config, RTT ms, kind
(matrix or saturation), pairs and payload, one per line; out the JSON lines
transport_load printed (group "main", and "probe" for the small calls of a
saturation run); err its stderr; rc its exit code; and for a saturation run
CELL_BASE.beside, the line bench/transport_pingpong.py printed for plain TCP
calls beside the same bulk load.
"""

import glob
import json
import os
import re
import sys

TICKS = os.sysconf("SC_CLK_TCK")


def size(n):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def load(base, link_bytes):
    meta = open(f"{base}.meta").read().split("\n")
    config, rtt, kind, pairs, payload = meta[0], int(meta[1]), meta[2], int(meta[3]), int(meta[4])
    groups = {}
    if os.path.exists(f"{base}.out"):
        for line in open(f"{base}.out"):
            line = line.strip()
            if line.startswith("{"):
                g = json.loads(line)
                groups[g["group"]] = g
    rc = int((open(f"{base}.rc").read().strip() or "1")) if os.path.exists(f"{base}.rc") else 1
    err = open(f"{base}.err").read().strip() if os.path.exists(f"{base}.err") else ""
    notes = open(f"{base}.notes").read().strip() if os.path.exists(f"{base}.notes") else ""
    cell = dict(config=config, rtt=rtt, kind=kind, pairs=pairs, payload=payload, rc=rc, notes=notes)
    for name, g in groups.items():
        secs = g["elapsed_s"] or 0
        calls = g["ok"] / secs if secs else 0.0
        steady_s = g.get("steady_s")
        steady = g["steady_ok"] * g["payload"] / steady_s / link_bytes if steady_s else None
        cell[name] = dict(
            g,
            calls_s=calls,
            mb_s=calls * g["payload"] / 1e6,
            link=calls * g["payload"] / link_bytes,
            steady_link=steady,
            cores=(g["cpu_ticks"] / TICKS / secs) if g.get("cpu_ticks") is not None and secs else None,
            host=g.get("host_busy_cores"),
        )
    beside = open(f"{base}.beside").read() if os.path.exists(f"{base}.beside") else ""
    found = re.search(r"p50 ([\d.]+) ms.*p99 ([\d.]+) ms", beside)
    if found:
        cell["plain_tcp_beside"] = dict(p50_ms=float(found[1]), p99_ms=float(found[2]))
    main = cell.get("main")
    if rc != 0 or not main:
        cell["failed"] = (err.splitlines() or [f"exit code {rc}"])[-1][:300]
    elif main["ok"] == 0:
        cell["failed"] = "no call succeeded: " + errors_text(main)
    if notes and "failed" in cell:
        cell["failed"] = notes.replace("\n", "; ") + "; " + cell["failed"]
    return cell


def errors_text(g):
    return "; ".join(
        f"{code} ×{e['count']}: {e['sample']}" for code, e in (g.get("error_codes") or {}).items()
    )


def one_line(cell):
    head = f"  {cell['config']} RTT {cell['rtt']} ms, {cell['kind']}, {cell['pairs']} × {size(cell['payload'])}:"
    if "failed" in cell:
        return f"{head} FAILED: {cell['failed']}"
    m = cell["main"]
    text = (f"{head} {m['calls_s']:.1f} calls/s, {m['mb_s']:.1f} MB/s ({m['link']:.0%} of the link"
            f"{share(m['steady_link'], ', steady ')}), p50 {m['p50_ms']:.1f} ms, p99 {m['p99_ms']:.1f} ms")
    if m["errors"]:
        text += f", {m['errors']} errors ({errors_text(m)})"
    if cell["notes"]:
        text += f" [{cell['notes']}]"
    p = cell.get("probe")
    if p:
        text += f"; small calls: {p['calls_s']:.1f}/s, p50 {p['p50_ms']:.1f} ms, p99 {p['p99_ms']:.1f} ms"
    t = cell.get("plain_tcp_beside")
    if t:
        text += f"; plain TCP beside: p50 {t['p50_ms']:.1f} ms, p99 {t['p99_ms']:.1f} ms"
    return text


def ratio(x):
    return f"{x:.2f}x" if x is not None else "—"


def share(x, prefix=""):
    return f"{prefix}{x:.0%}" if x is not None else ("" if prefix else "—")


def table(work, link_bytes, rate, queue_ms, shaper, latency, tcp_cc, results):
    bases = sorted(
        (p[: -len(".meta")] for p in glob.glob(f"{work}/cell-*.meta")),
        key=lambda b: int(b.rsplit("-", 1)[1]),
    )
    cells = [load(b, link_bytes) for b in bases]
    with open(results, "w") as f:
        for c in cells:
            f.write(json.dumps(c) + "\n")
    if not cells:
        print("no cells ran")
        return
    baseline = cells[0]["config"]
    by_key = {(c["config"], c["rtt"], c["kind"], c["pairs"], c["payload"]): c for c in cells}

    def base_of(c):
        b = by_key.get((baseline, c["rtt"], c["kind"], c["pairs"], c["payload"]))
        return None if b is None or "failed" in b else b

    print()
    print(f"Transport over an emulated WAN: calls enter daemon A, echo actors live on daemon B;")
    where = "a router namespace between them" if shaper == "router" else "each namespace's own veth"
    added = "held in the router's forwarding path" if latency == "kernel" else "added by toxiproxy"
    print(f"link: tbf {rate} each way on {where} (queue ≤ {queue_ms} ms), TCP {tcp_cc}, RTT {added};")
    print(f"closed-loop pairs; payload MB/s = calls/s × payload (each direction); link = that / {link_bytes / 1e6:.0f} MB/s;")
    print("steady = link in the steady state (after the warm-up, until the callers stop starting calls);")
    print("TCP p99 = plain TCP calls beside the same bulk load over the same emulated link (the emulator's floor);")
    print(f"CPU = cores busy: both daemons / the whole machine ({os.cpu_count()} cores; niced work not counted);")
    print(f"×base = calls/s over the baseline's ({baseline}); p99 ÷ = baseline p99 / this p99")
    notes = []
    for rtt in sorted({c["rtt"] for c in cells}, reverse=True):
        print()
        print(f"RTT {rtt} ms")
        print(f"{'config':<12} {'payload':>8} {'pairs':>5} {'calls':>7} {'errors':>6} {'calls/s':>9} {'MB/s':>7} "
              f"{'p50 ms':>9} {'p99 ms':>9} {'link':>5} {'steady':>6} {'CPU':>9} {'×base':>6} {'p99 ÷':>6}")
        for c in cells:
            if c["rtt"] != rtt or c["kind"] != "matrix":
                continue
            lead = f"{c['config']:<12} {size(c['payload']):>8} {c['pairs']:>5}"
            if "failed" in c:
                print(f"{lead} FAILED (see below)")
                notes.append(f"{c['config']} RTT {rtt} {size(c['payload'])} × {c['pairs']} FAILED: {c['failed']}")
                continue
            m, b = c["main"], base_of(c)
            if m["errors"] or c["notes"]:
                notes.append(f"{c['config']} RTT {rtt} {size(c['payload'])} × {c['pairs']}: "
                             f"{errors_text(m)} {c['notes']}".strip())
            x = m["calls_s"] / b["main"]["calls_s"] if b and b["main"]["calls_s"] else None
            y = b["main"]["p99_ms"] / m["p99_ms"] if b and m["p99_ms"] else None
            cores = "/".join(f"{v:.1f}" if v is not None else "—" for v in (m["cores"], m["host"]))
            print(f"{lead} {m['ok']:>7} {m['errors']:>6} {m['calls_s']:>9.1f} {m['mb_s']:>7.1f} "
                  f"{m['p50_ms']:>9.1f} {m['p99_ms']:>9.1f} {m['link']:>5.0%} {share(m['steady_link']):>6} {cores:>9} "
                  f"{ratio(x):>6} {ratio(y):>6}")
        sats = [c for c in cells if c["rtt"] == rtt and c["kind"] == "saturation"]
        if sats:
            print()
            print(f"small calls (1 KiB) while 16 callers of 8 MiB fill the link, RTT {rtt} ms")
            print(f"{'config':<12} {'bulk MB/s':>9} {'link':>5} {'steady':>6} {'CPU':>9} {'small/s':>8} {'errors':>6} "
                  f"{'p50 ms':>8} {'p99 ms':>8} {'p99-RTT':>8} {'p99 ÷':>6} {'TCP p99':>8}")
            for c in sats:
                if "failed" in c:
                    print(f"{c['config']:<12} FAILED (see below)")
                    notes.append(f"{c['config']} RTT {rtt} saturation FAILED: {c['failed']}")
                    continue
                m, p, b = c["main"], c.get("probe"), base_of(c)
                if not p or not p["ok"]:
                    why = errors_text(p) if p else "the bulk load ended before the small calls started"
                    print(f"{c['config']:<12} {m['mb_s']:>9.1f} {m['link']:>5.0%} no small call answered: {why[:100]}")
                    continue
                for g in (m, p):
                    if g["errors"]:
                        notes.append(f"{c['config']} RTT {rtt} saturation {g['group']}: {errors_text(g)}")
                bp = b.get("probe") if b else None
                y = bp["p99_ms"] / p["p99_ms"] if bp and bp["ok"] and p["p99_ms"] else None
                cores = "/".join(f"{v:.1f}" if v is not None else "—" for v in (m["cores"], m["host"]))
                t = c.get("plain_tcp_beside")
                tcp = f"{t['p99_ms']:.1f}" if t else "—"
                print(f"{c['config']:<12} {m['mb_s']:>9.1f} {m['link']:>5.0%} {share(m['steady_link']):>6} {cores:>9} "
                      f"{p['calls_s']:>8.1f} {p['errors']:>6} {p['p50_ms']:>8.1f} {p['p99_ms']:>8.1f} "
                      f"{p['p99_ms'] - rtt:>8.1f} {ratio(y):>6} {tcp:>8}")
    if notes:
        print()
        print("failures and errors:")
        for n in notes:
            print(f"  {n[:500]}")


def main():
    if sys.argv[1] == "--cell":
        print(one_line(load(sys.argv[2], int(sys.argv[3]))))
    elif sys.argv[1] == "--table":
        work, link_bytes, rate, queue_ms, shaper, latency, tcp_cc, results = sys.argv[2:10]
        table(work, int(link_bytes), rate, queue_ms, shaper, latency, tcp_cc, results)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
