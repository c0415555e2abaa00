# Sourced by scripts/gpu_*.sh and bench/run_all.sh: puts a symmwin wheel in a
# virtual environment of its own and that environment first on PATH, so `python3`,
# `symmwin` and the tests run from the checkout use the installed wheel, not the
# source tree. torch comes from the Python that makes the environment ($PYTHON, else
# python3): its site directories are added through a .pth file, after the wheel's.
#
#   gpu_use_wheel WHEEL   (a symmwin-*.whl, e.g. from scripts/build_gpu_ops_bins.sh)
#
# The environment is $SYMMWIN_VENV (default: one per wheel under ${TMPDIR:-/tmp}),
# kept and reused while it holds that wheel. STEP_TIMEOUT=SECONDS bounds each step
# run through `bounded` (default: unbounded; every wait inside symmwin has its own
# timeout).
gpu_use_wheel() {
  local wheel="$1" base="${PYTHON:-python3}" venv site
  case "$wheel" in
  *.whl) [ -f "$wheel" ] || { echo "no wheel at $wheel" >&2; return 1; } ;;
  *) echo "expected a symmwin-*.whl, got '$wheel' (scripts/build_gpu_ops_bins.sh DIR builds one)" >&2; return 1 ;;
  esac
  wheel="$(cd "$(dirname "$wheel")" && pwd)/$(basename "$wheel")"
  venv="${SYMMWIN_VENV:-${TMPDIR:-/tmp}/symmwin-venv-$(basename "$wheel" .whl)}"
  if [ ! -f "$venv/.wheel" ] || [ "$(cat "$venv/.wheel")" != "$wheel $(stat -c %Y "$wheel")" ]; then
    rm -rf "$venv"
    "$base" -m venv "$venv" || return 1
    site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    "$base" -c 'import site; print(*site.getsitepackages(), sep="\n")' > "$site/zz_torch_from_base.pth"
    "$venv/bin/python" -m pip install --quiet --no-index "$wheel" || return 1
    echo "$wheel $(stat -c %Y "$wheel")" > "$venv/.wheel"
  fi
  export PATH="$venv/bin:$PATH"
  unset PYTHONPATH
  if compgen -G "python/symmwin/_C*.so" > /dev/null; then
    echo "python/symmwin holds an in-place build, which the tests' ranks would import instead of the wheel: remove python/symmwin/_C*.so" >&2
    return 1
  fi
  python3 -c "import symmwin, torch; print('symmwin', symmwin.__version__, 'from', symmwin.__file__, '| torch', torch.__version__)"
}

bounded() {
  if [ -n "${STEP_TIMEOUT:-}" ]; then timeout "$STEP_TIMEOUT" "$@"; else "$@"; fi
}
