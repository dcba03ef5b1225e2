# venv_common.sh — what scripts/torch_env.sh and scripts/py_env.sh share, sourced by both: the
# --print/--help arguments, progress and failure lines, the stamp check, and one installer at a
# time. The caller sets tag (the progress prefix), venv, stamp and help (the line range of its
# own header comment that --help prints), calls venv_args "$@", computes want (what the stamp
# must hold for the venv to be up to date), then venv_lock_or_done before installing.
print=0
venv_args() {
    case "${1:-}" in
    "") ;;
    --print) print=1 ;;
    -h | --help) sed -n "${help}p" "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "$(basename "$0"): unknown option '$1' (valid: --print, --help)" >&2; exit 2 ;;
    esac
    [ $# -le 1 ] || { echo "$(basename "$0"): too many arguments (valid: --print, --help)" >&2; exit 2; }
}
# progress: on stderr when stdout carries the venv's python (--print)
say() { if [ $print = 1 ]; then echo "$tag: $*" >&2; else echo "$tag: $*"; fi; }
die() { echo "$tag: FAILED: $*" >&2; exit 1; }
venv_up_to_date() { [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; }
venv_done() { [ $print = 1 ] && echo "$venv/bin/python"; exit 0; }
# Exits when the venv is up to date, before or after waiting for another installer (parallel test
# jobs may call the script together); else holds the lock and starts the install log ($log).
venv_lock_or_done() {
    venv_up_to_date && venv_done
    mkdir -p "$(dirname "$venv")" || die "cannot create $(dirname "$venv")"
    exec 9>"$venv.lock" || die "cannot open $venv.lock"
    flock 9 || die "cannot lock $venv.lock"
    venv_up_to_date && venv_done
    log="$venv.install.log"
    : >"$log" || die "cannot write $log"
}
