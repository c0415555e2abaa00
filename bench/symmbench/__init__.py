"""The parts of bench/compare.py, importable by the other benchmarks in bench/.

- ``timing``: the timing harness (GPU and host timers, slowest rank, records, guards);
- ``cases`` and ``a2a``: what one job measures; ``worker``: one job, one backend;
- ``driver``: one torchrun job per backend; ``report`` and ``plot``: the merged results;
- ``defaults``, ``examples``, ``versions``: units and paths, the example kernels, the
  machine a run was on.

A script in bench/ imports them as ``from symmbench.timing import Harness`` (Python
puts the script's folder first on the path).
"""
