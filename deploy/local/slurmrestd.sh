#!/usr/bin/env bash
# slurmrestd for the local Slurm 22.05 stack, for the REST mode of `sickbay adapter slurm`.
#
#   slurmrestd.sh up       install slurmrestd if missing, start it on a UNIX socket with rest_auth/local
#   slurmrestd.sh down     stop the slurmrestd this script started
#   slurmrestd.sh status   exit 0 when it answers GET /slurm/v0.0.38/ping, 3 otherwise
#   slurmrestd.sh env      print the SICKBAY_SLURM_REST_* settings that point the adapter at it (source it)
#
# Why a UNIX socket and rest_auth/local, not TCP + JWT: rest_auth/jwt needs AuthAltTypes=auth/jwt (and a jwt key)
# in slurm.conf, which slurmctld only reads at start; restarting the shared controller requeues every running job
# of whoever else uses the stack. rest_auth/local needs no slurm.conf change: slurmrestd authenticates the peer
# of the socket (SO_PEERCRED) and talks to slurmctld with munge as that user. The adapter's JWT path
# (X-SLURM-USER-NAME / X-SLURM-USER-TOKEN) is unit-tested against a recorded exchange instead.
# Running as root (SlurmUser here) needs SLURMRESTD_SECURITY=disable_user_check; local testing only.
#
# Settings (env): SICKBAY_STACK_DIR (<repo>/.cache/stack), SICKBAY_SLURMRESTD_WAIT_S (60: how long `up` waits).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_DIR="$(cd "$SCRIPT_DIR/../.." && pwd -P)"
STACK="${SICKBAY_STACK_DIR:-$REPO_DIR/.cache/stack}"
case "$STACK" in /*) ;; *) STACK="$(pwd -P)/$STACK" ;; esac
DIR="$STACK/slurmrestd"
SOCK="$DIR/slurmrestd.sock"
PIDFILE="$DIR/slurmrestd.pid"
LOG="$DIR/slurmrestd.log"
export SLURM_CONF="$STACK/slurm/slurm.conf"

log() { printf '[slurmrestd.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

ensure_installed() {
    [[ -x /usr/sbin/slurmrestd ]] && return 0
    [[ "$(id -u)" == 0 ]] || die "slurmrestd is missing and we are not root"
    log "installing slurmrestd (apt-get)"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurmrestd
}

pid_running() {
    local pid
    [[ -s "$PIDFILE" ]] || return 1
    pid="$(tr -dc '0-9' <"$PIDFILE")"
    [[ -n "$pid" && -r "/proc/$pid/comm" ]] || return 1
    [[ "$(cat "/proc/$pid/comm")" == slurmrestd ]] || return 1
    printf '%s\n' "$pid"
}

# The last ping's status and body are kept in $DIR/ping.last, so a start that times out can say why
# (slurmrestd forwards the ping to slurmctld: no answer while the controller is down or swamped, an error
# status and its "errors" list when the controller refuses).
ping_ok() {
    [[ -S "$SOCK" ]] || return 1
    local code
    rm -f "$DIR/ping.body" "$DIR/ping.err"
    code="$(curl -sS --max-time 5 --unix-socket "$SOCK" -o "$DIR/ping.body" -w '%{http_code}' \
        http://slurmrestd/slurm/v0.0.38/ping 2>"$DIR/ping.err")" || code="none ($(cat "$DIR/ping.err"))"
    { printf 'HTTP %s\n' "$code"; head -c 2000 "$DIR/ping.body" 2>/dev/null || true; } >"$DIR/ping.last"
    [[ "$code" == 200 ]]
}

cmd_up() {
    ensure_installed
    [[ -f "$SLURM_CONF" ]] || die "no $SLURM_CONF: start Slurm first (deploy/local/slurm.sh up)"
    if pid_running >/dev/null; then
        log "slurmrestd already running (pid $(pid_running))"
        return 0
    fi
    mkdir -p "$DIR"
    chmod 0700 "$DIR"
    rm -f "$SOCK"
    log "starting slurmrestd on unix:$SOCK (rest_auth/local, openapi/v0.0.38)"
    SLURMRESTD_SECURITY=disable_user_check setsid /usr/sbin/slurmrestd -a rest_auth/local -s openapi/v0.0.38 \
        "unix:$SOCK" >>"$LOG" 2>&1 </dev/null &
    local child=$!
    echo "$child" >"$PIDFILE"
    # Usually ready in ~0.1 s. On a loaded 2-core CI host slurmctld can be slow to answer the ping that
    # slurmrestd forwards to it, so wait on a deadline rather than a count of tries.
    # Liveness here is `kill -0` on our own child, not pid_running: until setsid has exec'd slurmrestd the
    # child's comm still reads "bash" or "setsid", and taking that for an exit failed a CI run (bash reaps
    # the child when it exits, so kill -0 does fail then).
    local wait_s="${SICKBAY_SLURMRESTD_WAIT_S:-60}"
    local deadline=$((SECONDS + wait_s))
    while ((SECONDS < deadline)); do
        ping_ok && { log "ready (pid $child)"; return 0; }
        kill -0 "$child" 2>/dev/null || { log "slurmrestd exited"; break; }
        sleep 0.2
    done
    kill -INT "$child" 2>/dev/null || true
    rm -f "$PIDFILE"
    tail -n 20 "$LOG" >&2 || true
    log "last ping answer: $(cat "$DIR/ping.last" 2>/dev/null || echo none)"
    die "slurmrestd did not answer GET /slurm/v0.0.38/ping with 200 within ${wait_s}s"
}

cmd_down() {
    local pid i
    if pid="$(pid_running)"; then
        log "stopping slurmrestd (pid $pid)"
        kill -INT "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            pid_running >/dev/null || break
            sleep 0.1
        done
        if pid_running >/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    fi
    rm -f "$PIDFILE" "$SOCK"
}

cmd_status() {
    if pid_running >/dev/null && ping_ok; then
        echo "slurmrestd: running pid $(pid_running) on unix:$SOCK"
        return 0
    fi
    echo "slurmrestd: not running"
    return 3
}

cmd_env() {
    printf 'export SICKBAY_SLURM_MODE=rest\n'
    printf 'export SICKBAY_SLURM_REST_URL=%q\n' "unix:$SOCK"
    printf 'export SICKBAY_SLURM_REST_API=v0.0.38\n'
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    *) sed -n '2,/^[^#]/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
