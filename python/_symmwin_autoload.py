"""symmwin's ``torch.backends`` entry point: torch calls :func:`load` at the end of
``import torch`` in every process (unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``).

It does nothing unless ``SYMMWIN_AUTOLOAD=1``: then it imports symmwin, whose import
selects SYMMWIN (CUDA tensors) and SYMMWIN_HOST (CPU tensors) as torch's symmetric
memory backends, so that a program that never names symmwin runs on it. It lives
outside the package so that the unset case imports nothing. It never makes
``import torch`` fail: any problem is a warning naming the setting, and torch's own
backends stay in place.
"""

import os
import sys

SETTING = "SYMMWIN_AUTOLOAD"


def load() -> None:
    """Select symmwin's backends when ``SYMMWIN_AUTOLOAD=1``; otherwise nothing."""
    value = os.environ.get(SETTING, "").strip()
    if value in ("", "0"):
        return
    if "symmwin" in sys.modules:
        # symmwin's own import started this `import torch`; it selects the backends
        # itself when it finishes.
        return
    try:
        if value != "1":
            raise ValueError(f'{SETTING}="{value}" is not a switch; allowed: 0 or 1')
        import symmwin  # noqa: F401  (its import selects the backends: symmwin._autoload)
    except Exception as e:  # noqa: BLE001  (import torch must not fail because of us)
        import warnings

        warnings.warn(
            f"{SETTING}: symmwin was not made torch's symmetric memory backend ({e}); "
            "torch's own backends stay in use",
            RuntimeWarning,
            stacklevel=2,
        )
