#!/usr/bin/env bash
# scripts/gpu_bundle.sh — the GPU bundle: what bench/gpu_check.sh runs on a lent GPU machine, built
# here and carried there, because that machine (its own CUDA image, no package registry) has none
# of our Debian libraries: no cJSON, Open MPI, OpenBLAS or Criterion (docs/gpu.md "The bundle").
#
#   scripts/gpu_bundle.sh pack BUILD DEST     copy the programs of BUILD (stripped) into DEST/bin,
#                                             every library they need that is neither glibc nor
#                                             CUDA into DEST/lib, Open MPI and PMIx relocatable
#                                             into DEST/openmpi and DEST/pmix; write DEST/MANIFEST,
#                                             DEST/bundle-env and the archive DEST.tar.xz (what
#                                             travels), and fail when the archive and the working
#                                             tree together pass GPU_BUNDLE_LIMIT_MIB (48)
#   scripts/gpu_bundle.sh verify DEST         with only DEST and the CUDA libraries on the library
#                                             path: ldd resolves every library of every ELF file
#                                             in DEST inside DEST, to glibc or to CUDA; every
#                                             program starts (LD_BIND_NOW, so a missing symbol
#                                             shows too); with --mpi, 2 ranks of comm_check run
#                                             through DEST's mpirun and load nothing from outside
#   scripts/gpu_bundle.sh cuda-needed DEST    the CUDA libraries the bundle needs from the machine
#
# Libraries travel by LD_LIBRARY_PATH, set by DEST/bundle-env for the one command it runs (and
# inherited by mpirun's ranks), not by an RPATH: an RPATH on the programs would not reach the
# libraries' own dependencies (RUNPATH is not transitive) and patching the libraries needs
# patchelf, which is not here; and a library path exported to the whole check would hand the
# device's python3 and tools our older libstdc++ and libz. CUDA (runtime, cuBLAS, NCCL, CUPTI) is
# never carried: the device has its own, found by bench/gpu_check.sh and passed here in
# MEMPLAN_CUDA_LIB_PATH (verify's default: this machine's $CUDA_HOME, standing in for it).
# Exit status: 0 ok; 1 a check or step failed (one line says which); 2 usage.
set -u

# The programs bench/gpu_check.sh runs, as paths under BUILD: the one list (the bundle's MANIFEST
# carries it to the device, where the check reads it back).
PROGRAMS=(memplan memplan-exec bench/gpu_overheads bench/cnn_device bench/bench_nccl
          tests/test_kern_cuda tests/test_kern_cnn_cuda tests/test_prof_cupti tests/test_prof_overhead
          tests/test_exec_device tests/test_exec_comm tests/test_exec_gpu tests/mpi/comm_check)
# Sonames that are never carried: glibc (every Linux has its own, newer on the device) ...
GLIBC_RE='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libmvec\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libresolv\.so\.2|libutil\.so\.1|libanl\.so\.1|libnss_[a-z]+\.so\.2)$'
# ... and CUDA: the driver and the toolkit's libraries, which the device has in its own versions.
CUDA_RE='^(libcuda\.so\.1|libcudart\.so\.[0-9]+|libcublas(Lt)?\.so\.[0-9]+|libnccl\.so\.[0-9]+|libcupti\.so\.[0-9]+|libnvidia-[a-z-]+\.so\.[0-9.]+|libnvperf_[a-z]+\.so|libnvrtc\.so\.[0-9]+|libnvJitLink\.so\.[0-9]+)$'
# Open MPI components not carried: the fabrics a one-node check never uses (UCX, libfabric,
# InfiniBand, PSM; the system's openmpi-mca-params.conf already excludes most) and OpenSHMEM.
DROP_RE='(ucx|ofi|openib|psm|atomic_|memheap_|scoll_|spml_|sshmem_)'
LIMIT_MIB=${GPU_BUNDLE_LIMIT_MIB:-48}   # of the device tool's 64 MiB per call: room left for wheels
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
ROOT=$(cd "$(dirname "$0")/.." && pwd)

die() { echo "gpu_bundle: $*" >&2; exit 1; }
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

# Every ELF file under a folder (programs, libraries, plugins).
elf_files() {
  local f
  while IFS= read -r -d '' f; do is_elf "$f" && printf '%s\n' "$f"; done < <(find "$1" -type f -print0 | sort -z)
}

# ldd FILE under LIB_PATH, as lines "soname<TAB>resolved path or 'not found'".
ldd_pairs() {  # ldd_pairs LIB_PATH FILE
  LD_LIBRARY_PATH=$1 ldd "$2" 2>/dev/null | awk '
    $2 == "=>" && $3 == "not" { print $1 "\tnot found"; next }
    $2 == "=>" { print $1 "\t" $3; next }
    $1 ~ /^\// { n = split($1, p, "/"); print p[n] "\t" $1 }'
}

mpi_path() { ompi_info --parsable --path "$1" 2>/dev/null | sed -n "s/^path:$1://p"; }

pack() {
  local build=$1 dest=$2 p f
  [ -d "$build" ] || die "no build folder $build (make all bench test-bin)"
  command -v ompi_info >/dev/null || die "ompi_info not found: Open MPI (openmpi-bin) is needed to pack its launcher"
  dest=$(mkdir -p "$dest" && cd "$dest" && pwd) || die "cannot create $2"
  rm -rf "${dest:?}"/* "$dest.tar.xz"
  mkdir -p "$dest/bin" "$dest/lib" "$dest/hwloc-plugins" "$dest/openmpi/bin" "$dest/openmpi/etc" "$dest/openmpi/share" \
           "$dest/pmix/lib" "$dest/pmix/share" "$dest/pmix/etc"
  for p in "${PROGRAMS[@]}"; do
    [ -x "$build/$p" ] || die "missing $build/$p (make all bench test-bin)"
    mkdir -p "$dest/bin/$(dirname "$p")"
    # stripped: the debug info is most of each file, and nobody debugs on the device
    strip --strip-unneeded -o "$dest/bin/$p" "$build/$p" || die "strip $build/$p"
  done

  # Open MPI 4.1: the launcher, its components, help texts and settings, laid out under one
  # prefix so that OPAL_PREFIX and the OPAL_*DIR variables of bundle-env relocate it
  local bindir pkglibdir pkgdatadir sysconfdir
  bindir=$(mpi_path bindir); pkglibdir=$(mpi_path pkglibdir)
  pkgdatadir=$(mpi_path pkgdatadir); sysconfdir=$(mpi_path sysconfdir)
  [ -d "$pkglibdir" ] || die "ompi_info names no component folder (pkglibdir '$pkglibdir')"
  for p in orterun orted ompi_info; do cp "$bindir/$p" "$dest/openmpi/bin/" || die "copy $bindir/$p"; done
  ln -s orterun "$dest/openmpi/bin/mpirun"
  mkdir -p "$dest/openmpi/lib/$(basename "$pkglibdir")"
  for f in "$pkglibdir"/*.so; do
    [[ $(basename "$f") =~ $DROP_RE ]] && continue
    cp "$f" "$dest/openmpi/lib/$(basename "$pkglibdir")/"
  done
  cp -r "$pkgdatadir" "$dest/openmpi/share/" || die "copy $pkgdatadir"
  {
    cat "$sysconfdir/openmpi-mca-params.conf" 2>/dev/null
    echo "# gpu bundle: no single-copy (CMA) transfers between ranks: a sandboxed kernel may refuse"
    echo "# process_vm_readv, and the ranks' bulk data moves over NCCL anyway"
    echo "btl_vader_single_copy_mechanism = none"
  } > "$dest/openmpi/etc/openmpi-mca-params.conf"
  cp "$sysconfdir/openmpi-default-hostfile" "$dest/openmpi/etc/" 2>/dev/null || : > "$dest/openmpi/etc/openmpi-default-hostfile"

  # PMIx (Open MPI's launcher talks to its ranks through it): the prefix of the libpmix that
  # the pmix component loads; its settings file names its absolute component folder, so the
  # bundle's says nothing and bundle-env names the folder
  local pmixlib pmixprefix
  pmixlib=$(ldd_pairs "" "$pkglibdir/mca_pmix_ext3x.so" | awk -F'\t' '$1 ~ /^libpmix\.so/ { print $2 }')
  [ -f "$pmixlib" ] || die "cannot find the libpmix of $pkglibdir/mca_pmix_ext3x.so"
  pmixprefix=$(dirname "$(dirname "$(readlink -f "$pmixlib")")")
  cp -r "$pmixprefix/lib/pmix" "$dest/pmix/lib/" || die "copy $pmixprefix/lib/pmix"
  [ -d "$pmixprefix/share/pmix" ] && cp -r "$pmixprefix/share/pmix" "$dest/pmix/share/"
  echo "# gpu bundle: the component folder comes from PMIX_MCA_mca_base_component_path (bundle-env)" \
    > "$dest/pmix/etc/pmix-mca-params.conf"

  # every library the bundle's ELF files need, less glibc and CUDA (ldd gives the closure)
  local name path missing=""
  while IFS=$'\t' read -r name path; do
    [[ $name =~ $GLIBC_RE || $name =~ $CUDA_RE ]] && continue
    if [ "$path" = "not found" ]; then missing+=" $name"; continue; fi
    [ -e "$dest/lib/$name" ] || cp -L "$path" "$dest/lib/$name" || die "copy $path"
  done < <(elf_files "$dest" | while IFS= read -r f; do ldd_pairs "" "$f"; done | sort -u)
  [ -z "$missing" ] || die "libraries not found on this machine:$missing"

  # what the device check reads back: the programs, the CUDA libraries to find there, the build
  local commit cuda_needed
  commit=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
  git -C "$ROOT" diff --quiet HEAD 2>/dev/null || commit="$commit (with uncommitted changes)"
  # the closure, with this machine's CUDA standing in: libcublas brings libcublasLt
  cuda_needed=$(elf_files "$dest" | while IFS= read -r f; do ldd_pairs "$(cuda_lib_path)" "$f"; done \
                | cut -f1 | grep -E "$CUDA_RE" | grep -v '^libcuda\.so' | sort -u | tr '\n' ' ')
  {
    echo "# memplan GPU bundle (scripts/gpu_bundle.sh; docs/gpu.md \"The bundle\")"
    echo "commit: $commit"
    echo "built: $(date -u '+%Y-%m-%dT%H:%M:%SZ') on $(sed -n 's/^PRETTY_NAME="*\([^"]*\)"*/\1/p' /etc/os-release 2>/dev/null), $(ldd --version 2>&1 | head -n 1)"
    echo "openmpi: $(ompi_info --parsable 2>/dev/null | sed -n 's/^ompi:version:full://p')"
    echo "cuda_needed: ${cuda_needed% }"
    echo "glibc_needed: $(elf_files "$dest" | xargs objdump -T 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)"
    for p in "${PROGRAMS[@]}"; do echo "program: $p"; done
  } > "$dest/MANIFEST"
  write_env "$dest/bundle-env"

  # the archive is what travels: xz takes OpenBLAS (36 MiB: every CPU's kernels) to a few MiB
  if ! tar -C "$(dirname "$dest")" -cf - "$(basename "$dest")" | xz -T0 -"${GPU_BUNDLE_XZ_LEVEL:-6}" > "$dest.tar.xz.tmp"; then
    die "cannot write $dest.tar.xz"
  fi
  mv "$dest.tar.xz.tmp" "$dest.tar.xz" || die "cannot write $dest.tar.xz"
  report_size "$dest"
}

# The wrapper that runs one command with the bundle's libraries and its relocated Open MPI.
write_env() {
  cat > "$1" <<'ENV'
#!/bin/sh
# bundle-env CMD [ARGS...] — runs CMD with this bundle's libraries first on the library path, then
# the CUDA folders in MEMPLAN_CUDA_LIB_PATH (bench/gpu_check.sh finds them on the device), and its
# Open MPI and PMIx relocated here (OPAL_PREFIX and the folders Open MPI would otherwise take from
# its configure-time /usr); its mpirun comes first on PATH. Only CMD and its children see this.
B=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
LD_LIBRARY_PATH="$B/lib${MEMPLAN_CUDA_LIB_PATH:+:$MEMPLAN_CUDA_LIB_PATH}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PATH="$B/openmpi/bin:$PATH"
OPAL_PREFIX=$B/openmpi OPAL_EXEC_PREFIX=$B/openmpi OPAL_BINDIR=$B/openmpi/bin OPAL_LIBDIR=$B/lib
OPAL_PKGLIBDIR=$(echo "$B"/openmpi/lib/openmpi*)
OPAL_DATAROOTDIR=$B/openmpi/share OPAL_DATADIR=$B/openmpi/share OPAL_PKGDATADIR=$B/openmpi/share/openmpi
OPAL_SYSCONFDIR=$B/openmpi/etc
PMIX_INSTALL_PREFIX=$B/pmix PMIX_LIBDIR=$B/lib PMIX_DATAROOTDIR=$B/pmix/share PMIX_DATADIR=$B/pmix/share
PMIX_PKGLIBDIR=$B/pmix/lib/pmix PMIX_PKGDATADIR=$B/pmix/share/pmix PMIX_SYSCONFDIR=$B/pmix/etc
PMIX_MCA_mca_base_component_path=$B/pmix/lib/pmix
# hwloc would load the plugins of the machine's own hwloc (another version on the device): none
HWLOC_PLUGINS_PATH=$B/hwloc-plugins
export HWLOC_PLUGINS_PATH
export LD_LIBRARY_PATH PATH OPAL_PREFIX OPAL_EXEC_PREFIX OPAL_BINDIR OPAL_LIBDIR OPAL_PKGLIBDIR \
       OPAL_DATAROOTDIR OPAL_DATADIR OPAL_PKGDATADIR OPAL_SYSCONFDIR PMIX_INSTALL_PREFIX PMIX_LIBDIR \
       PMIX_DATAROOTDIR PMIX_DATADIR PMIX_PKGLIBDIR PMIX_PKGDATADIR PMIX_SYSCONFDIR \
       PMIX_MCA_mca_base_component_path
exec "$@"
ENV
  chmod +x "$1"
}

# The archive, the working tree that travels with it (tracked files, untracked ones git does not
# ignore, a shared/ folder: what the device tool sends), and their sum against the limit.
report_size() {
  local dest=$1 unpacked archive tree total
  unpacked=$(du -sb "$dest" | cut -f1)
  archive=$(stat -c %s "$dest.tar.xz")
  tree=$(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard 2>/dev/null \
         | xargs -0 -r stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
  # a shared/ folder inside the checkout travels too, ignored or not
  [ -d "$ROOT/shared" ] && tree=$((tree + $(du -sb "$ROOT/shared" | cut -f1)))
  total=$((archive + tree))
  echo "gpu_bundle: $dest: $(find "$dest/bin" -type f | wc -l) programs, $(find "$dest/lib" -type f | wc -l) libraries," \
       "$(mib "$unpacked") MiB unpacked; archive $dest.tar.xz $(mib "$archive") MiB;" \
       "with the working tree ($(mib "$tree") MiB) $(mib "$total") MiB travel, of the device tool's 64 (limit here $LIMIT_MIB)"
  [ "$total" -le $((LIMIT_MIB * 1048576)) ] || die "too large: $(mib "$total") MiB travel, over $LIMIT_MIB MiB"
}

cuda_lib_path() { echo "${MEMPLAN_CUDA_LIB_PATH-$CUDA_HOME/lib64:$CUDA_HOME/extras/CUPTI/lib64}"; }

# Checks the bundle as the device will use it; prints one line per problem and a closing verdict.
verify() {
  local dest=$1 mpi=$2 fails=0 n=0 f name path where cudap libpath
  [ -f "$dest/MANIFEST" ] || die "$dest has no MANIFEST (scripts/gpu_bundle.sh pack)"
  dest=$(cd "$dest" && pwd)
  cudap=$(cuda_lib_path)
  libpath="$dest/lib${cudap:+:$cudap}"
  echo "# verify $dest (CUDA from: ${cudap:-the default library path})"
  # 1. ldd: every library of every ELF file resolves inside the bundle, to glibc or to CUDA
  while IFS= read -r f; do
    n=$((n + 1))
    while IFS=$'\t' read -r name path; do
      if [ "$path" = "not found" ]; then where=MISSING
      elif [[ $path == "$dest"/* ]]; then continue
      elif [[ $name =~ $GLIBC_RE || $name =~ $CUDA_RE ]]; then continue
      else where=OUTSIDE; fi
      echo "ldd: ${f#"$dest"/}: $name => $path ($where)"
      fails=$((fails + 1))
    done < <(ldd_pairs "$libpath" "$f")
  done < <(elf_files "$dest")
  echo "# ldd: $n ELF files checked"
  # 2. every program starts: its main runs (usage or help, any exit status but the loader's)
  local p out rc started=0
  while read -r p; do
    out=$(MEMPLAN_CUDA_LIB_PATH=$cudap LD_BIND_NOW=1 timeout 20 "$dest/bundle-env" "$dest/bin/$p" --help 2>&1 </dev/null)
    rc=$?
    if [ "$rc" -ge 124 ] || grep -qE 'error while loading shared libraries|symbol lookup error|version .* not found' <<<"$out"; then
      echo "start: $p: FAIL (exit $rc): $(grep -m1 -E 'error|not found' <<<"$out" || head -n 1 <<<"$out")"
      fails=$((fails + 1))
    else
      started=$((started + 1))
    fi
  done < <(sed -n 's/^program: //p' "$dest/MANIFEST")
  echo "# start: $started program(s) started"
  # 3. Open MPI takes its components, help texts and settings from the bundle
  local dir
  for dir in pkglibdir pkgdatadir sysconfdir; do
    path=$("$dest/bundle-env" ompi_info --parsable --path "$dir" 2>/dev/null | sed -n "s/^path:$dir://p")
    [[ $path == "$dest"/* ]] && continue
    echo "openmpi: FAIL: its $dir is '$path', not inside the bundle"
    fails=$((fails + 1))
  done
  # 4. two MPI ranks through the bundle's mpirun, and every object they load is ours, glibc or CUDA
  if [ "$mpi" = 1 ]; then
    local dbg obj bad=""
    dbg=$(mktemp -d) || die "mktemp"
    out=$(MEMPLAN_CUDA_LIB_PATH=$cudap OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
          LD_DEBUG=files LD_DEBUG_OUTPUT="$dbg/ld" timeout 60 \
          "$dest/bundle-env" mpirun -np 2 --oversubscribe "$dest/bin/tests/mpi/comm_check" collectives 2>&1 </dev/null)
    rc=$?
    while IFS= read -r obj; do
      [[ $obj == "$dest"/* ]] && continue
      name=$(basename "$obj")
      [[ $name =~ $GLIBC_RE || $name =~ $CUDA_RE ]] && continue
      bad+=" $obj"
    done < <(sed -n 's/.*calling init: //p' "$dbg"/ld.* 2>/dev/null | sort -u)
    rm -rf "$dbg"
    if [ "$rc" != 0 ] || [ "$(grep -c 'comm_check: rank [01] ok' <<<"$out")" != 2 ]; then
      echo "mpirun: FAIL (exit $rc): $(grep -v '^$' <<<"$out" | head -n 3 | tr '\n' ' ')"
      fails=$((fails + 1))
    elif [ -n "$bad" ]; then
      echo "mpirun: FAIL: loaded from outside the bundle:$bad"
      fails=$((fails + 1))
    else
      echo "# mpirun: 2 ranks of comm_check ok through $dest/openmpi/bin/mpirun, nothing loaded from outside"
    fi
  fi
  if [ "$fails" -gt 0 ]; then echo "# verify: FAIL: $fails problem(s)"; return 1; fi
  echo "# verify: ok"
}

case "${1:-}" in
  pack) [ $# -eq 3 ] || usage; pack "$2" "$3" ;;
  verify)
    mpi=0
    [ "${3:-}" = --mpi ] && mpi=1
    [ $# -eq 2 ] || { [ $# -eq 3 ] && [ "$mpi" = 1 ]; } || usage
    verify "$2" "$mpi" ;;
  cuda-needed) [ $# -eq 2 ] || usage; sed -n 's/^cuda_needed: //p' "$2/MANIFEST" ;;
  *) usage ;;
esac
