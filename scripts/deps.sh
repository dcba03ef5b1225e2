#!/usr/bin/env bash
# Checks the Debian packages memplan builds and tests with; installs the missing ones with
# apt-get when run as root, otherwise names them and fails. Optional GPU parts are reported.
set -u
required="gcc make libcjson-dev libyaml-dev zlib1g-dev libcriterion-dev libopenmpi-dev openmpi-bin libopenblas-dev ca-certificates"
# make web (emscripten; node-acorn: its JavaScript optimizer) and the browser test (chromium, chromium-driver)
optional="gnuplot-nox emscripten node-acorn chromium chromium-driver"
# memplan-fetch (a hub model's config.json) links libcurl: any of Debian's three -dev flavours
# (they conflict with one another), the OpenSSL one installed when none is.
curl_dev=libcurl4-openssl-dev
for p in libcurl4-openssl-dev libcurl4-gnutls-dev libcurl4-nss-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && curl_dev=$p
done
required="$required $curl_dev"
# `make test` builds the PyTorch venv (scripts/torch_env.sh) with `python3 -m venv`, which needs
# ensurepip. Debian ships it apart, in python3-venv (a fresh Debian 12 may lack python3 too); a
# python3 from elsewhere, like the build machine's pyenv 3.11, carries its own. So they are
# required only where the python3 on PATH cannot make a venv.
venv_ok=1
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || { venv_ok=0; required="$required python3 python3-venv"; }
missing=""
for p in $required $optional; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "# deps: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends $missing >/dev/null \
      || { echo "deps: apt-get install$missing failed" >&2; exit 1; }
  else
    echo "deps: missing Debian packages:$missing (run as root: apt-get install$missing)" >&2
    for p in $missing; do case " $required " in *" $p "*) exit 1;; esac; done
  fi
fi
cuda=${CUDA_HOME:-/usr/local/cuda}
st() { [ -e "$1" ] && echo found || echo "not found"; }
[ $venv_ok = 1 ] || python3 -c 'import ensurepip, venv' >/dev/null 2>&1 ||
  echo "deps: python3 -m venv still cannot work: $(command -v python3 || echo 'no python3 on PATH') has no ensurepip" \
       "(make test needs it for scripts/torch_env.sh)" >&2
echo "# deps: cjson yaml zlib criterion openmpi openblas curl ok; gnuplot $(command -v gnuplot >/dev/null && echo found || echo 'not found (plots off)');" \
     "emcc $(command -v emcc >/dev/null && echo found || echo 'not found (no make web)'); chromium $(command -v chromedriver >/dev/null && echo found || echo 'not found (no browser test)');" \
     "nvcc $(st "$cuda/bin/nvcc"); nccl $(st "$cuda/include/nccl.h"); cupti $(st "$cuda/include/cupti.h")"
