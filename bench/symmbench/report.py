"""The merged report: results.md (tables), results.json (every job's rows) and results.png.

results.json is ``{"date": ..., "results": [job, ...]}``, a job being
``{"backend", "world", "items", "errors", "versions", "rc"}`` as ``worker.Job.run``
and the driver write it; ``--report-only`` rebuilds everything else from it.
"""

from __future__ import annotations

import datetime
import json
import statistics
from pathlib import Path

from .defaults import MIB, size_label
from .plot import plot

LATENCY_KINDS = ("alloc", "barrier", "allreduce", "latency")


def med_rng(vals):
    return statistics.median(vals), min(vals), max(vals)


def report(results: list[dict], out: Path, date: str = "") -> str:
    """Write results.md, results.json and results.png to `out`; the markdown."""
    vers = next((r["versions"] for r in results if r.get("versions")), {})
    date = date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    rows, sizes = a2a_rows(results)
    lines = header(results, vers, date) + a2a_section(rows, sizes) + latency_section(results) + errors_section(results)
    md = "\n".join(lines)
    (out / "results.md").write_text(md)
    (out / "results.json").write_text(json.dumps({"date": date, "results": results}, indent=1))
    plot(rows, sizes, out / "results.png", f"{date}: {vers.get('gpu', '?')}, torch {vers.get('torch', '?')}")
    return md


def header(results: list[dict], vers: dict, date: str) -> list[str]:
    world = next((r["world"] for r in results if r.get("world")), "?")
    return [
        f"# SYMMWIN vs torch backends: {date}",
        "",
        f"Machine: {vers.get('gpu', '?')}, driver {vers.get('driver', '?')}, host {vers.get('host', '?')}; "
        f"torch {vers.get('torch', '?')} (CUDA {vers.get('cuda', '?')}), Triton {vers.get('triton', '?')}, "
        f"NCCL {vers.get('nccl', '?')}, Python {vers.get('python', '?')}, symmwin {vers.get('symmwin_rev', '?')}; "
        f"{world} ranks, one per GPU.",
        "",
        "Cells: median [min-max] over the repeats (each repeat: the slowest rank).",
        "",
    ]


def a2a_rows(results: list[dict]):
    """({(backend, impl, mode): {size: row}}, sorted sizes) of every all-to-all row."""
    a2a = [(r["backend"], it) for r in results for it in r["items"] if it["kind"] == "a2a"]
    sizes = sorted({it["size"] for _, it in a2a})
    rows = {}
    for backend, it in a2a:
        rows.setdefault((backend, it["impl"], it["mode"]), {})[it["size"]] = it
    return rows, sizes


def a2a_section(rows: dict, sizes: list[int]) -> list[str]:
    if not rows:
        return []
    lines = [
        "## All-to-all: per-rank GB/s (bytes leaving the GPU / time) and us/iter, by chunk per peer",
        "",
        "| backend | implementation | mode | " + " | ".join(size_label(s) for s in sizes) + " |",
        "| --- | --- | --- | " + " | ".join("---" for _ in sizes) + " |",
    ]
    for (backend, impl, mode), by_size in sorted(rows.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
        cells = [a2a_cell(by_size.get(s)) for s in sizes]
        lines.append(f"| {backend} | {impl} | {mode} | " + " | ".join(cells) + " |")
    lines += ["", "Launch shapes picked by the tuning pass:", ""]
    for (backend, impl, mode), by_size in sorted(rows.items()):
        cfgs = [f"{size_label(s)}: {by_size[s]['config']}" for s in sizes if s in by_size and by_size[s].get("config")]
        if cfgs:
            lines.append(f"- {backend} {impl} {mode}: " + "; ".join(cfgs))
    lines.append("")
    return lines


def a2a_cell(it: dict | None) -> str:
    if not it:
        return "-"
    g, glo, ghi = med_rng(it["gbs"])
    u = statistics.median(it["us"])
    return f"{g:.0f} [{glo:.0f}-{ghi:.0f}] GB/s, {u:.1f} us"


def latency_section(results: list[dict]) -> list[str]:
    """One row per latency or memory figure, one column per backend."""
    backends = [r["backend"] for r in results]
    keys = []
    cells = {}
    for r in results:
        for it in r["items"]:
            if it["kind"] in LATENCY_KINDS:
                label = it["impl"] + (f" {size_label(it['size'])}" if it.get("size") else "") + f" ({it['mode']})"
                m, lo, hi = med_rng(it["us"])
                cell = f"{m:.1f} [{lo:.1f}-{hi:.1f}]"
            elif it["kind"] == "memory":
                label = f"device memory, {it['impl']} 64 MiB window (MiB)"
                cell = f"{it['bytes'] / MIB:.1f}"
            else:
                continue
            if label not in keys:
                keys.append(label)
            cells[(label, r["backend"])] = cell
    if not keys:
        return []
    lines = [
        "## Latency (us) and memory",
        "",
        "| what | " + " | ".join(backends) + " |",
        "| --- | " + " | ".join("---" for _ in backends) + " |",
    ]
    lines += [f"| {k} | " + " | ".join(cells.get((k, b), "-") for b in backends) + " |" for k in keys]
    lines.append("")
    return lines


def errors_section(results: list[dict]) -> list[str]:
    errs = [(r["backend"], e) for r in results for e in r.get("errors", [])]
    if not errs:
        return []
    return ["## Not measured (errors)", ""] + [f"- {b}: {e['what']}: {e['error']}" for b, e in errs] + [""]
