import importlib.util
import sys
from pathlib import Path

# harness.py and scenarios.py are plain modules next to the tests.
sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_report_header(config):
    # Which symmwin the tests use: an installed wheel (site-packages) or an in-place
    # build in a checkout's python/ (PYTHONPATH). Found without importing it.
    spec = importlib.util.find_spec("symmwin")
    where = Path(spec.origin).parent if spec and spec.origin else "nowhere (not installed)"
    return f"symmwin from {where}"
