"""Builds the gohccl Python package: libgohccl (Go, -buildmode=c-shared) and
the torch extension gohccl._C that links it.

    pip install .                           # into the environment that has torch
    pip install -e .                        # editable: libraries land in python/gohccl/
    pip wheel --no-deps -w dist .           # a wheel to install elsewhere (same torch minor)

The extension is compiled against the torch installed in the environment pip
installs into (find_torch), whose version must be within TORCH_RANGE; the
wheel then requires that torch minor release. libgohccl.so is placed in
gohccl/lib/ beside gohccl/_C*.so, which finds it through the rpath
$ORIGIN/lib. Building needs Go (set GO to choose the go binary); installing
the wheel does not. Metadata, extras and the entry point: pyproject.toml.

Two build variables (read by this file only, not by libgohccl):

    LIBGOHCCL=/path/to/libgohccl.so   use this prebuilt library (the C ABI
                                      has no Python or torch in it) instead
                                      of building one with Go: for a machine
                                      without Go, e.g. benchmarks/gpucheck
    ANY_TORCH=1                       build against a torch outside
                                      TORCH_RANGE (with a warning); such a
                                      build is untested, and torch releases
                                      before 2.14 also need
                                      benchmarks/gpucheck/torch-pre-2.14.patch
"""

import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import setup

ROOT = os.path.dirname(os.path.abspath(__file__))
GO_LIB = "libgohccl.so"

# TORCH_RANGE is the torch releases gohccl is built and tested against:
# (major, minor) from the first to the last supported, inclusive. The README's
# install section states the same range.
TORCH_RANGE = ((2, 14), (2, 15))


def find_torch():
    """find_torch imports the torch the package will run with and returns its
    version as (major, minor, text). pip builds in an isolated environment
    that hides the target's site-packages; torch is found there by asking the
    same interpreter in isolated mode (-I ignores pip's PYTHONPATH), and that
    site directory is appended to sys.path for this build only."""
    try:
        import torch  # noqa: F401
    except ImportError:
        probe = subprocess.run(
            [sys.executable, "-I", "-c",
             "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))"],
            capture_output=True, text=True)
        site = probe.stdout.strip()
        if probe.returncode != 0 or not site:
            sys.exit(
                f"gohccl cannot be built: torch is not installed in this environment ({sys.executable}). "
                f"Install torch {range_text()} first (pip install torch), then install gohccl."
            )
        sys.path.append(site)
    import torch

    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    version = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    if not TORCH_RANGE[0] <= version <= TORCH_RANGE[1]:
        if os.environ.get("ANY_TORCH") == "1":
            print(f"warning: building against torch {torch.__version__}, outside the supported "
                  f"{range_text()} (ANY_TORCH=1)", file=sys.stderr, flush=True)
            return version[0], version[1], torch.__version__
        sys.exit(
            f"gohccl cannot be built against torch {torch.__version__} ({os.path.dirname(torch.__file__)}): "
            f"it supports torch {range_text()}. Install a supported torch, "
            f"e.g. pip install 'torch>={TORCH_RANGE[0][0]}.{TORCH_RANGE[0][1]},"
            f"<{TORCH_RANGE[1][0]}.{TORCH_RANGE[1][1] + 1}'."
        )
    return version[0], version[1], torch.__version__


def range_text():
    (a, b), (c, d) = TORCH_RANGE
    return f"{a}.{b}.x to {c}.{d}.x"


TORCH_MAJOR, TORCH_MINOR, TORCH_VERSION = find_torch()

from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402


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
            replace_file(os.path.join(self._go_lib_dir(), GO_LIB), os.path.join(dst, GO_LIB))

    def _go_lib_dir(self):
        ext_path = os.path.join(self.build_lib, self.get_ext_filename("gohccl._C"))
        return os.path.join(os.path.dirname(ext_path), "lib")

    def build_extension(self, ext):
        lib_dir = self._go_lib_dir()
        build_go_library(lib_dir)
        ext.library_dirs.append(lib_dir)
        super().build_extension(ext)


def replace_file(src, dst):
    """Copies src over dst by renaming a full copy onto it: a process that
    has dst mapped (a job still running the library being rebuilt) keeps
    the old file, where a copy into dst would truncate the pages under it
    and kill it with SIGBUS."""
    tmp = f"{dst}.{os.getpid()}.tmp"
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def build_go_library(lib_dir):
    os.makedirs(lib_dir, exist_ok=True)
    out = os.path.join(lib_dir, GO_LIB)
    prebuilt = os.environ.get("LIBGOHCCL")
    if prebuilt:
        if not os.path.isfile(prebuilt):
            raise RuntimeError(f"LIBGOHCCL={prebuilt}: no such file (a libgohccl.so built with "
                               "`go build -buildmode=c-shared -o libgohccl.so ./capi`)")
        print(f"using the prebuilt libgohccl: {prebuilt} (LIBGOHCCL)", flush=True)
        if os.path.abspath(prebuilt) != os.path.abspath(out):
            replace_file(prebuilt, out)
        return
    go = os.environ.get("GO") or shutil.which("go")
    if not go:
        raise RuntimeError(
            "gohccl needs the Go toolchain (go 1.26 or newer) to build libgohccl; "
            "put `go` on PATH or set GO=/path/to/go"
        )
    cmd = [go, "build", "-buildmode=c-shared", "-o", out, "./capi"]
    print("building libgohccl:", " ".join(shlex.quote(c) for c in cmd), flush=True)
    subprocess.check_call(cmd, cwd=ROOT)
    # go build also writes the cgo-generated header; the hand-written
    # capi/include/gohccl.h is the one callers use.
    header = os.path.splitext(out)[0] + ".h"
    if os.path.exists(header):
        os.remove(header)


setup(
    # The extension links against this torch's C++ ABI, so the package needs
    # the same minor release at run time.
    install_requires=[f"torch=={TORCH_MAJOR}.{TORCH_MINOR}.*"],
    ext_modules=[
        CppExtension(
            name="gohccl._C",
            sources=[
                "csrc/module.cpp",
                "csrc/ProcessGroupGoHCCL.cpp",
                "csrc/Collective.cpp",
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
)
