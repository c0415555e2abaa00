import sys
from pathlib import Path

# harness.py and scenarios.py are plain modules next to the tests.
sys.path.insert(0, str(Path(__file__).resolve().parent))
