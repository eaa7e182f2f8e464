"""Builds the gohccl Python package: libgohccl (Go, -buildmode=c-shared) and
the torch extension gohccl._C that links it.

    pip install --no-build-isolation -e .   # editable: libraries land in python/gohccl/
    pip install --no-build-isolation .      # regular wheel

libgohccl.so is placed in gohccl/lib/ beside gohccl/_C*.so, which finds it
through the rpath $ORIGIN/lib. Set GO to choose the go binary.
"""

import os
import shlex
import shutil
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
GO_LIB = "libgohccl.so"


class BuildGoAndExtension(BuildExtension):
    """BuildExtension that first builds libgohccl into the package's lib/."""

    def run(self):
        super().run()
        # setuptools builds into build_lib and, for in-place and editable
        # builds, copies the extension back to the source tree; libgohccl has
        # to follow it there.
        if self.inplace:
            build_py = self.get_finalized_command("build_py")
            dst = os.path.join(build_py.get_package_dir("gohccl"), "lib")
            os.makedirs(dst, exist_ok=True)
            shutil.copy2(os.path.join(self._go_lib_dir(), GO_LIB), dst)

    def _go_lib_dir(self):
        ext_path = os.path.join(self.build_lib, self.get_ext_filename("gohccl._C"))
        return os.path.join(os.path.dirname(ext_path), "lib")

    def build_extension(self, ext):
        lib_dir = self._go_lib_dir()
        build_go_library(lib_dir)
        ext.library_dirs.append(lib_dir)
        super().build_extension(ext)


def build_go_library(lib_dir):
    go = os.environ.get("GO") or shutil.which("go")
    if not go:
        raise RuntimeError(
            "gohccl needs the Go toolchain (go 1.26 or newer) to build libgohccl; "
            "put `go` on PATH or set GO=/path/to/go"
        )
    os.makedirs(lib_dir, exist_ok=True)
    out = os.path.join(lib_dir, GO_LIB)
    cmd = [go, "build", "-buildmode=c-shared", "-o", out, "./capi"]
    print("building libgohccl:", " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.check_call(cmd, cwd=ROOT)
    # go build also writes the cgo-generated header; the hand-written
    # capi/include/gohccl.h is the one callers use.
    header = os.path.splitext(out)[0] + ".h"
    if os.path.exists(header):
        os.remove(header)


setup(
    name="gohccl",
    version="0.1.0",
    description="HCCL-style collective communication in Go, as the torch.distributed backend 'gohccl'",
    packages=["gohccl", "gohccl.bench"],
    package_dir={"": "python"},
    python_requires=">=3.10",
    install_requires=["torch"],
    ext_modules=[
        CppExtension(
            name="gohccl._C",
            sources=[
                "csrc/module.cpp",
                "csrc/ProcessGroupGoHCCL.cpp",
                "csrc/WorkGoHCCL.cpp",
            ],
            include_dirs=[os.path.join(ROOT, "capi", "include"), os.path.join(ROOT, "csrc")],
            libraries=["gohccl"],
            # -g0 overrides the -g of Python's own flags: debug info for
            # torch's templates makes the build several times slower and the
            # extension ten times larger.
            extra_compile_args=["-O2", "-g0"],
            extra_link_args=["-Wl,-rpath,$ORIGIN/lib"],
        )
    ],
    cmdclass={"build_ext": BuildGoAndExtension},
    zip_safe=False,
)
