"""results.png: all-to-all GB/s (graph, eager) and us/iter (graph) by chunk size, one line per row."""

from __future__ import annotations

import statistics
from pathlib import Path

from .defaults import KIB


def plot(rows, sizes, path: Path, title: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot", flush=True)
        return
    fig, axes = plt.subplots(1, 3, figsize=(18, 6))
    series = sorted({(b, i) for b, i, _ in rows})
    colors = {k: plt.cm.tab20(j % 20) for j, k in enumerate(series)}
    panels = [(0, "graph", "gbs"), (1, "eager", "gbs"), (2, "graph", "us")]
    for ax_i, want_mode, key in panels:
        ax = axes[ax_i]
        for (backend, impl, mode), by_size in sorted(rows.items()):
            xs = [s for s in sizes if s in by_size]
            if mode != want_mode or not xs:
                continue
            ax.plot([x / KIB for x in xs], [statistics.median(by_size[x][key]) for x in xs],
                    "-" if backend == "SYMMWIN" else "--", marker="o", ms=3, color=colors[(backend, impl)],
                    label=f"{backend}: {impl}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("chunk per peer (KiB)")
        ax.set_ylabel("GB/s per rank (leaving the GPU)" if key == "gbs" else "us per all-to-all")
        ax.set_title(f"{'GB/s' if key == 'gbs' else 'us/iter'}, {want_mode}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        if key == "gbs":
            ax.axhline(478, color="gray", lw=0.8, ls=":")
            ax.set_ylim(0, 500)
        else:
            ax.set_yscale("log")
    axes[0].legend(fontsize=6, loc="upper left")
    fig.suptitle(f"All-to-all push, {title}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
