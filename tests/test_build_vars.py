"""setup.py's two build variables (benchmarks/gpucheck uses both on a GPU
machine without Go and with an older torch): LIBGOHCCL, a prebuilt
libgohccl.so used instead of building one with Go, and ANY_TORCH=1, a build
against a torch outside the supported range, with a warning."""

import os
import shutil
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.timeout(120)


def setup_py(code, env_extra=None, pythonpath=None):
    """Runs setup.py's module body (as `setup.py --version`, which builds
    nothing), then code with its globals as g, in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LIBGOHCCL", "ANY_TORCH")}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    env.update(env_extra or {})
    prog = ("import runpy, sys\n"
            "sys.argv = ['setup.py', '--version']\n"
            "g = runpy.run_path('setup.py')\n" + code)
    return subprocess.run([sys.executable, "-c", prog], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=100, env=env)


def test_prebuilt_library_is_copied_without_go(tmp_path):
    lib = tmp_path / "prebuilt.so"
    lib.write_bytes(b"not really a library, only its bytes are checked")
    out = tmp_path / "lib"
    r = setup_py(f"g['build_go_library']({str(out)!r})",
                 {"LIBGOHCCL": str(lib), "GO": "/nonexistent/go", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert (out / "libgohccl.so").read_bytes() == lib.read_bytes()
    assert "using the prebuilt libgohccl" in r.stdout


def test_missing_prebuilt_library_is_named(tmp_path):
    r = setup_py(f"g['build_go_library']({str(tmp_path / 'lib')!r})",
                 {"LIBGOHCCL": str(tmp_path / "absent.so")})
    assert r.returncode != 0
    assert f"LIBGOHCCL={tmp_path / 'absent.so'}: no such file" in r.stderr


def test_rebuilt_library_replaces_the_file_a_running_job_maps(tmp_path):
    """setup.py puts a rebuilt libgohccl.so in place by renaming a copy onto
    it: a process still running the old library keeps calling into it.
    Copied into the same file instead, its pages change under that process,
    which dies of SIGBUS (what `make build` during a benchmark did)."""
    dst = tmp_path / "libgohccl.so"
    shutil.copyfile(os.path.join(REPO_ROOT, "python", "gohccl", "lib", "libgohccl.so"), dst)
    stop = tmp_path / "stop"
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import ctypes, os, sys, time\n"
         f"lib = ctypes.CDLL({str(dst)!r})\n"
         "lib.gohccl_version.restype = ctypes.c_char_p\n"
         "print('loaded', flush=True)\n"
         "end = time.time() + 60\n"
         f"while not os.path.exists({str(stop)!r}) and time.time() < end:\n"
         "    lib.gohccl_version()\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "loaded"
        new = tmp_path / "new.so"
        new.write_bytes(os.urandom(1 << 20))
        r = setup_py(f"g['replace_file']({str(new)!r}, {str(dst)!r})")
        assert r.returncode == 0, r.stderr
        assert dst.read_bytes() == new.read_bytes()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["libgohccl.so", "new.so"]
        stop.touch()
        assert child.wait(timeout=30) == 0
    finally:
        child.kill()
        child.wait()


def fake_torch(tmp_path, version):
    """A torch package that has only what setup.py imports."""
    t = tmp_path / "torch"
    (t / "utils").mkdir(parents=True)
    (t / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (t / "utils" / "__init__.py").write_text("")
    (t / "utils" / "cpp_extension.py").write_text(
        "from setuptools import Extension\n"
        "from setuptools.command.build_ext import build_ext as BuildExtension\n"
        "def CppExtension(name, sources, **kw):\n"
        "    return Extension(name, sources, **kw)\n")
    return str(tmp_path)


@pytest.mark.parametrize("version", ["2.11.0", "2.16.0"])
def test_any_torch_builds_outside_the_range_with_a_warning(tmp_path, version):
    path = fake_torch(tmp_path, version)
    refused = setup_py("", pythonpath=path)
    assert refused.returncode != 0 and f"cannot be built against torch {version}" in refused.stderr
    r = setup_py("print('requires', g['TORCH_MAJOR'], g['TORCH_MINOR'])", {"ANY_TORCH": "1"}, pythonpath=path)
    assert r.returncode == 0, r.stderr
    assert f"warning: building against torch {version}, outside the supported 2.14.x to 2.15.x" in r.stderr
    major, minor = version.split(".")[:2]
    assert f"requires {major} {minor}" in r.stdout
