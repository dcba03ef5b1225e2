#!/usr/bin/env bash
# Create or update the venv that runs the Python package's tests and the browser test (make
# test): python/requirements-test.txt (pytest, pandas, matplotlib, selenium, about 350 MB with their numpy) in
#   ${MEMPLAN_PY_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/memplan/py-venv}
# beside the PyTorch venv of scripts/torch_env.sh, whose packages (torch, transformers,
# accelerate) it sees through a .pth file instead of installing them a second time. A stamp
# records the hash of the requirements and that venv's path; when they match, nothing is done.
#
#   scripts/py_env.sh --print   create / update, then print the venv's python on stdout
# On failure: one line naming the failed stage, exit 1.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
req="$root/python/requirements-test.txt"
venv=${MEMPLAN_PY_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/memplan/py-venv}
stamp="$venv/.memplan-requirements.sha256"
tag=py-env help=2,10
# shellcheck source=scripts/venv_common.sh
. "$root/scripts/venv_common.sh"
venv_args "$@"

torch_py=$("$root/scripts/torch_env.sh" --print) || die "the PyTorch venv (scripts/torch_env.sh)"
torch_site=$("$torch_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || die "$torch_py: its site-packages"
want="$(sha256sum "$req" | cut -d' ' -f1) $torch_site"
venv_lock_or_done
# the same interpreter as the PyTorch venv's, so that its packages import here
base=$("$torch_py" -c 'import sys; print(sys._base_executable)') || die "$torch_py: its base interpreter"
if ! [ -x "$venv/bin/python" ] || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    say "creating venv $venv with $base"
    "$base" -m venv --clear "$venv" >>"$log" 2>&1 || die "$base -m venv $venv (see $log)"
fi
say "installing $(grep -v -E '^[[:space:]]*(#|$)' "$req" | tr '\n' ' ')"
"$venv/bin/python" -m pip --disable-pip-version-check install -r "$req" >>"$log" 2>&1 || die "pip install -r $req (see $log)"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || die "$venv: its site-packages"
echo "$torch_site" >"$site/memplan-torch-venv.pth" || die "cannot write $site/memplan-torch-venv.pth"
"$venv/bin/python" -c 'import pytest, pandas, matplotlib, selenium, transformers' >>"$log" 2>&1 ||
    die "import pytest/pandas/matplotlib/selenium/transformers in $venv (see $log)"
echo "$want" >"$stamp" || die "cannot write $stamp"
say "ready: $venv/bin/python"
venv_done
