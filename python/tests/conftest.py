"""Shared by the package's tests: the memplan program they hold the package to (MEMPLAN_BIN, default
build/memplan of this clone) and a way to run it."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))   # the package built in place (make py-test)


@pytest.fixture(scope="session")
def memplan_bin():
    path = os.environ.get("MEMPLAN_BIN", os.path.join(ROOT, "build", "memplan"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: build it (make build/memplan) or set MEMPLAN_BIN")
    return path


class Cli:
    """The program, run on a command line; .json() parses its standard output."""

    def __init__(self, path):
        self.path = path

    def run(self, args, cwd=None):
        return subprocess.run([self.path] + list(args), capture_output=True, text=True, cwd=cwd)

    def json(self, args, cwd=None):
        r = self.run(args, cwd)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)


@pytest.fixture(scope="session")
def cli(memplan_bin):
    return Cli(memplan_bin)
