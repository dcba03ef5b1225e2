#!/usr/bin/env bash
# Create or update the Python venv that runs memplan's PyTorch ground-truth harness
# (bench/torch/harness.py).  The venv lives outside the clone, so CI and later clones reuse it:
#   ${MEMPLAN_TORCH_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/memplan/torch-venv}
# It holds the pinned versions of bench/torch/requirements.txt (about 5.5 GB: torch pulls its
# CUDA wheels, which load fine without a GPU).  A stamp file in the venv records the hash of
# requirements.txt; when it matches, the script only checks the stamp and exits.
#
#   scripts/torch_env.sh           create / update, one line of progress per stage
#   scripts/torch_env.sh --print   the same, then print the venv's python path on stdout
#                                  (progress goes to stderr)
# Needs python3 >= 3.10 on PATH that can make a venv (the pyenv 3.11 on the build machine; on
# Debian, /usr/bin/python3 needs the python3-venv package, which scripts/deps.sh installs as
# root) and network access to PyPI for the first install.  On failure: one line naming the
# failed stage, exit 1.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
req="$root/bench/torch/requirements.txt"
venv=${MEMPLAN_TORCH_ENV:-${XDG_CACHE_HOME:-$HOME/.cache}/memplan/torch-venv}
stamp="$venv/.memplan-requirements.sha256"
tag=torch-env help=2,15
# shellcheck source=scripts/venv_common.sh
. "$root/scripts/venv_common.sh"
venv_args "$@"

[ -r "$req" ] || die "cannot read $req"
want=$(sha256sum "$req" | cut -d' ' -f1) || die "sha256sum of $req"
venv_lock_or_done
run() { "$@" >>"$log" 2>&1; }

py=$(command -v python3) || die "python3 not on PATH (Debian: apt-get install python3 python3-venv)"
run "$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    die "python3 ($py) is older than 3.10"
# A venv made by a python3 without ensurepip has a python but no pip: make it again.
fresh=0
[ -x "$venv/bin/python" ] || fresh=1
if [ $fresh = 0 ] && ! run "$venv/bin/python" -m pip --version; then
    say "venv $venv has no pip (made without ensurepip?): making it again"
    fresh=1
fi
if [ $fresh = 1 ]; then
    run "$py" -c 'import ensurepip, venv' ||
        die "python3 ($py) cannot make a venv: no ensurepip (Debian: apt-get install python3-venv, or run scripts/deps.sh as root)"
    say "creating venv $venv with $py"
    run "$py" -m venv --clear "$venv" || die "python3 -m venv $venv (see $log)"
else
    say "updating venv $venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
say "installing setuptools, wheel"
run "${pip[@]}" install setuptools wheel || die "pip install setuptools wheel (see $log)"
base=$(grep -v -E '^[[:space:]]*(#|$)|^deepspeed' "$req")
# shellcheck disable=SC2086 # one requirement per word
say "installing $(echo $base | tr '\n' ' ')(about 5 GB on a fresh venv)"
# shellcheck disable=SC2086
run "${pip[@]}" install $base || die "pip install $(echo $base) (see $log)"
ds=$(grep -E '^deepspeed' "$req")
if [ -n "$ds" ]; then
    say "installing $ds (DS_BUILD_OPS=0)"
    run env DS_BUILD_OPS=0 "${pip[@]}" install --no-build-isolation "$ds" ||
        die "DS_BUILD_OPS=0 pip install $ds (see $log)"
fi
say "checking imports"
run "$venv/bin/python" -c 'import torch, transformers, torchvision, torch.distributed as d
assert d.is_available() and d.is_gloo_available()
if "deepspeed" in open("'"$req"'").read():
    import deepspeed' || die "import torch/transformers/torchvision/deepspeed in $venv (see $log)"
echo "$want" >"$stamp" || die "cannot write $stamp"
say "ready: $venv/bin/python"
venv_done
