"""What ``SYMMWIN_AUTOLOAD=1`` does once symmwin is imported: SYMMWIN (CUDA) and
SYMMWIN_HOST (CPU) become torch's symmetric memory backends of this process.

torch takes one backend per device type and locks it at its first use (the first
``symm_mem.empty``), so this must run before that: ``import torch`` imports symmwin
through the ``torch.backends`` entry point (``_symmwin_autoload``), which is the
earliest a process can. A program that calls ``set_backend`` itself before its first
allocation keeps its own choice.
"""

from __future__ import annotations

import os
import warnings

SETTING = "SYMMWIN_AUTOLOAD"


def requested() -> bool:
    """True when the setting asks for the backends (``import symmwin`` has checked
    its value: anything but unset, 0 or 1 failed there)."""
    return os.environ.get(SETTING, "").strip() == "1"


def select(backend: str, host_backend: str) -> bool:
    """Make `backend` and `host_backend` torch's symmetric memory backends; False,
    with a warning naming the setting, when torch has locked a backend already."""
    import torch.distributed._symmetric_memory as symm_mem

    try:
        symm_mem.set_backend(backend)
        symm_mem.set_backend(host_backend)
    except RuntimeError as e:
        warnings.warn(
            f"{SETTING}=1: symmwin could not become torch's symmetric memory backend "
            f"({e}); symmetric memory was used before symmwin was imported",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True
