#!/usr/bin/env python3
"""Summarizes a kernel trace written by libktrace.so (scripts/ktrace/inj.c).

    python3 kernels.py TRACE [--match SUBSTR] [--seq NAME [--count N]]

Per kernel (name and grid.x): how many ran, the median duration, and the
median wall time it added: its end less the later of its start and the end
of every kernel that started before it (what the run would lose without
it, in a stream of kernels that overlap through programmatic dependent
launch). --match keeps the kernels whose name holds SUBSTR. --seq prints
the N kernels from the middle occurrence of NAME on: start (µs from the
first), duration, wall added. Records with zero timestamps (dropped by
CUPTI) are counted and left out; so are the wall times right after one.
"""
import argparse
import statistics
import sys


def load(path):
    rows, dropped = [], 0
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) < 9 or p[0] != "K":
                continue
            start, end = int(p[1]), int(p[2])
            name = f"{p[8]}[{p[3]}]"
            if start == 0 or end < start:
                dropped += 1
                rows.append((None, None, name))
                continue
            rows.append((start, end, name))
    return rows, dropped


def walls(rows):
    """(start, end, name, wall) of the valid rows in start order; wall is
    None where the row before it was dropped."""
    valid = sorted((r for r in rows if r[0] is not None), key=lambda r: r[0])
    out, last_end = [], None
    for s, e, n in valid:
        w = None if last_end is None else max(0, e - max(last_end, s))
        out.append((s, e, n, w))
        last_end = e if last_end is None else max(last_end, e)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--match", default="")
    ap.add_argument("--seq")
    ap.add_argument("--count", type=int, default=30)
    a = ap.parse_args()
    rows, dropped = load(a.trace)
    if not rows:
        sys.exit(f"{a.trace}: no kernel records")
    ks = walls(rows)
    print(f"{len(rows)} kernel records, {dropped} dropped by CUPTI (zero timestamps)")
    if a.seq:
        at = [i for i, k in enumerate(ks) if k[2].startswith(a.seq)]
        if not at:
            sys.exit(f"no kernel named {a.seq}")
        i = at[len(at) // 2]
        t0 = ks[i][0]
        print(f"{'start µs':>10} {'dur µs':>8} {'wall µs':>8}  kernel")
        for s, e, n, w in ks[i:i + a.count]:
            print(f"{(s - t0) / 1e3:10.2f} {(e - s) / 1e3:8.2f} {'' if w is None else f'{w / 1e3:8.2f}':>8}  {n}")
        return
    by = {}
    for s, e, n, w in ks:
        if a.match in n:
            d = by.setdefault(n, ([], []))
            d[0].append(e - s)
            if w is not None:
                d[1].append(w)
    total = sum(sum(v[1]) for v in by.values())
    print(f"{'n':>7} {'med dur µs':>11} {'med wall µs':>12} {'wall ms':>9} {'share':>6}  kernel")
    for n, (durs, ws) in sorted(by.items(), key=lambda kv: -sum(kv[1][1])):
        wsum = sum(ws)
        med = statistics.median(ws) / 1e3 if ws else float("nan")
        print(f"{len(durs):7d} {statistics.median(durs) / 1e3:11.2f} {med:12.2f} {wsum / 1e6:9.2f} "
              f"{100 * wsum / total if total else 0:5.1f}%  {n}")


if __name__ == "__main__":
    main()
