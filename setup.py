"""Build the torch adapter: the Rust C ABI (static library) plus a torch C++ extension.

    pip install --no-build-isolation .

The extension is compiled against the torch already installed (its SymmetricMemory
interface changes every minor release), hence no build isolation. Set
SYMMWIN_PREBUILT_LIB=/path/libsymmwin_capi.a to skip cargo.
"""

import json
import os
import subprocess
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = Path(__file__).resolve().parent


def capi_static_lib() -> str:
    prebuilt = os.environ.get("SYMMWIN_PREBUILT_LIB")
    if prebuilt:
        if not Path(prebuilt).is_file():
            raise SystemExit(f"SYMMWIN_PREBUILT_LIB={prebuilt} does not exist")
        return prebuilt
    # Ask cargo where the artifact is rather than guessing: CARGO_TARGET_DIR and
    # build.target-dir in a cargo config move it.
    out = subprocess.run(
        ["cargo", "build", "--release", "-p", "symmwin-capi", "--message-format=json-render-diagnostics"],
        cwd=ROOT,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") == "compiler-artifact" and msg["target"]["name"] == "symmwin_capi":
            for f in msg["filenames"]:
                if f.endswith(".a"):
                    return f
    raise SystemExit("cargo built symmwin-capi but reported no static library")


class Build(BuildExtension):
    def build_extensions(self):
        lib = capi_static_lib()
        for ext in self.extensions:
            ext.extra_objects = [lib]
            # A rebuilt core must relink the extension even if the C++ is unchanged.
            ext.depends = [*ext.depends, lib]
        super().build_extensions()


setup(
    package_dir={"": "python"},
    packages=["symmwin"],
    ext_modules=[
        CppExtension(
            "symmwin._C",
            ["csrc/symmwin_torch.cpp", "csrc/symmwin_remote.cpp", "csrc/ops.cpp"],
            include_dirs=[str(ROOT / "crates/symmwin-capi/include")],
            depends=["crates/symmwin-capi/include/symmwin.h", "csrc/symmwin_ops.h", "csrc/symmwin_remote.h"],
            extra_compile_args=["-O2"],
            extra_link_args=[
                # Keep the Rust runtime's symbols private to this module.
                "-Wl,--exclude-libs,ALL",
                # What the Rust static library needs (cargo --print native-static-libs).
                "-ldl",
                "-lpthread",
                "-lrt",
                "-lutil",
                "-lm",
            ],
        )
    ],
    cmdclass={"build_ext": Build},
)
