"""The machine and software a run was on: results.json's ``versions``."""

from __future__ import annotations

import platform
import socket
import subprocess

from .defaults import ROOT


def versions(torch) -> dict:
    v = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "host": socket.gethostname(),
    }
    try:
        import triton

        v["triton"] = triton.__version__
    except ImportError:
        pass
    try:
        v["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:  # noqa: BLE001
        pass
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        v["gpu"] = f"{torch.cuda.device_count()}x {p.name} ({p.multi_processor_count} SMs)"
    try:
        v["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        ).stdout.split()[0]
    except Exception:  # noqa: BLE001
        pass
    try:
        v["symmwin_rev"] = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip() or "unknown"
    except Exception:  # noqa: BLE001
        v["symmwin_rev"] = "unknown"
    return v
