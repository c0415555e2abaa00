"""Build the symmwin wheel: the Rust core (static library) linked into a torch C++
extension, the `symmwin` command beside it, for the torch installed here.

    pip wheel . -w dist --no-build-isolation --no-deps
    pip install --no-build-isolation .

The extension is compiled against the installed torch (its SymmetricMemory interface
changes every minor release), hence no build isolation; the wheel requires that torch
minor (`torch>=2.11,<2.12`) and says so in its version (`0.1.0+torch2.11`). The CUDA
kernels are PTX compiled into the Rust library and loaded by the driver at run time, so
neither building nor installing needs a CUDA toolkit.

Without cargo: SYMMWIN_PREBUILT_LIB=/path/libsymmwin_capi.a, and the command from
SYMMWIN_PREBUILT_CLI=/path/symmwin (default: a `symmwin` next to the library; without
one the wheel has no command).
"""

import json
import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
from build_backend import prepare_build, torch_minor  # noqa: E402

prepare_build(sys.argv[1:])

import torch  # noqa: E402
from setuptools import setup  # noqa: E402
from setuptools.command.build_py import build_py  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402

TORCH_MAJOR, TORCH_MINOR = torch_minor(torch.__version__)
BUILD_INFO = ROOT / "python/symmwin/_build_info.py"
# The C++ adapter is every file of csrc/, one concept each (docs/design.md).
ADAPTER_SOURCES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "csrc").glob("*.cpp"))
ADAPTER_HEADERS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "csrc").glob("*.h"))


class RustArtifacts(NamedTuple):
    static_lib: str
    cli: str | None


def cargo_version() -> str:
    """The workspace version in Cargo.toml: one version for the crates and the wheel."""
    text = (ROOT / "Cargo.toml").read_text()
    section = text.split("[workspace.package]", 1)[1]
    return re.search(r'^version\s*=\s*"([^"]+)"', section, re.M)[1]


def cargo_build() -> RustArtifacts:
    # Ask cargo where the artifacts are rather than guessing: CARGO_TARGET_DIR and
    # build.target-dir in a cargo config move them.
    out = subprocess.run(
        [os.environ.get("CARGO", "cargo"), "build", "--release", "-p", "symmwin-capi", "-p", "symmwin-cli",
         "--message-format=json-render-diagnostics"],
        cwd=ROOT,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    static_lib = cli = None
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact":
            continue
        if msg["target"]["name"] == "symmwin_capi":
            static_lib = next((f for f in msg["filenames"] if f.endswith(".a")), static_lib)
        elif msg["target"]["name"] == "symmwin" and msg.get("executable"):
            cli = msg["executable"]
    if static_lib is None or cli is None:
        raise SystemExit("symmwin build: cargo built symmwin-capi and symmwin-cli but reported no static library or binary")
    return RustArtifacts(static_lib, cli)


@cache
def rust_artifacts() -> RustArtifacts:
    prebuilt = os.environ.get("SYMMWIN_PREBUILT_LIB")
    if not prebuilt:
        return cargo_build()
    if not Path(prebuilt).is_file():
        raise SystemExit(f"symmwin build: SYMMWIN_PREBUILT_LIB={prebuilt} does not exist")
    cli = os.environ.get("SYMMWIN_PREBUILT_CLI") or str(Path(prebuilt).with_name("symmwin"))
    if not Path(cli).is_file():
        print(f"symmwin build: no {cli}: the package gets no `symmwin` command", file=sys.stderr)
        return RustArtifacts(prebuilt, None)
    return RustArtifacts(prebuilt, cli)


def write_build_info() -> None:
    """python/symmwin/_build_info.py: what this build was made against, which
    symmwin._torch_check compares with the torch it is imported under."""
    text = (
        '"""Written by setup.py at build time (not in git): what this build of symmwin was made against."""\n\n'
        f"VERSION = {version()!r}\n"
        f"TORCH_VERSION = {str(torch.__version__)!r}\n"
        f"TORCH_MINOR = ({TORCH_MAJOR}, {TORCH_MINOR})\n"
    )
    if not BUILD_INFO.is_file() or BUILD_INFO.read_text() != text:
        BUILD_INFO.write_text(text)


def version() -> str:
    # A local label, as flash-attn does: which torch minor the binary is for.
    return f"{cargo_version()}+torch{TORCH_MAJOR}.{TORCH_MINOR}"


class BuildPy(build_py):
    """Pure-Python files, plus the generated build info and the `symmwin` binary."""

    def run(self):
        write_build_info()
        super().run()
        cli = rust_artifacts().cli
        if cli:
            dest = Path(self.build_lib) / "symmwin" / "bin" / "symmwin"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cli, dest)
            dest.chmod(0o755)


class Build(BuildExtension):
    def build_extensions(self):
        write_build_info()  # also for `setup.py build_ext --inplace`, which skips build_py
        lib = rust_artifacts().static_lib
        for ext in self.extensions:
            ext.extra_objects = [lib]
            # A rebuilt core must relink the extension even if the C++ is unchanged.
            ext.depends = [*ext.depends, lib]
        super().build_extensions()


setup(
    version=version(),
    install_requires=[f"torch>={TORCH_MAJOR}.{TORCH_MINOR},<{TORCH_MAJOR}.{TORCH_MINOR + 1}"],
    package_dir={"": "python"},
    packages=["symmwin"],
    # Outside the package, so that importing them imports neither symmwin nor torch:
    # torch's `torch.backends` entry point (pyproject.toml), which does nothing unless
    # SYMMWIN_AUTOLOAD=1, and the `symmwin` command (python/_symmwin_cli.py says why).
    py_modules=["_symmwin_autoload", "_symmwin_cli"],
    ext_modules=[
        CppExtension(
            "symmwin._C",
            ADAPTER_SOURCES,
            include_dirs=[str(ROOT / "crates/symmwin-capi/include")],
            depends=["crates/symmwin-capi/include/symmwin.h", *ADAPTER_HEADERS],
            extra_compile_args=["-O2"],
            extra_link_args=[
                # Keep the Rust runtime's symbols private to this module.
                "-Wl,--exclude-libs,ALL",
                # Rust's standard library comes with debug info: 14 of the 21 MB.
                "-Wl,--strip-debug",
                # What the Rust static library needs (cargo --print native-static-libs).
                "-ldl",
                "-lpthread",
                "-lrt",
                "-lutil",
                "-lm",
            ],
        )
    ],
    cmdclass={"build_py": BuildPy, "build_ext": Build},
)
