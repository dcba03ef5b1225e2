"""Builds memplan's CPython extension (memplan._memplan) from the repository's own C sources.

`make embed-sources` (the Makefile, which also builds the program) writes the zoo's C file and
names what to compile: the planning front end without its main (cli/memplan_api.c is the entry
point), the planner, and the vendored cJSON, libyaml and tomlc17, so that the extension links
no system library but libm. Needs a C11 compiler and make; no MPI, CUDA or BLAS.
"""
import os
import re
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def version() -> str:
    with open(os.path.join(ROOT, "cli", "memplan_front.h"), encoding="utf-8") as f:
        return re.search(r'#define MEMPLAN_VERSION "([^"]+)"', f.read()).group(1)


def embed_sources():
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}   # under make test
        out = subprocess.run(["make", "-s", "--no-print-directory", "NO_DEPS=1", "embed-sources"], cwd=ROOT, env=env,
                             check=True, capture_output=True, text=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        raise SystemExit(f"memplan: `make embed-sources` failed (the build needs make and a C compiler): {detail}")
    return out[0].split(), out[1].split()


class BuildExt(build_ext):
    """Asks the Makefile for the sources and flags when the extension is built (not when pip
    only reads the metadata)."""

    def build_extensions(self):
        sources, flags = embed_sources()
        for ext in self.extensions:
            ext.sources = sources + ext.sources
            ext.extra_compile_args = flags + ["-O2", "-w"]   # -w: the vendored code's warnings; make builds -Werror
        super().build_extensions()


setup(
    version=version(),
    ext_modules=[Extension("memplan._memplan", sources=["python/memplan/_memplan.c"], libraries=["m"])],
    cmdclass={"build_ext": BuildExt},
)
