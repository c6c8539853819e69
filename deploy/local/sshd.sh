#!/usr/bin/env bash
# A throwaway sshd on this host that plays the Slurm "control host" for the SSH mode of `sickbay adapter slurm`.
# Own config, own host key, own client key and authorized_keys under $STACK/sshd; nothing in /etc/ssh or ~/.ssh
# is read or changed. sshd runs in the foreground (-D) as a child started by this script, so `down` stops exactly it.
#
#   sshd.sh up        install openssh-server if missing, create keys, start sshd on $PORT, wait until a login works
#   sshd.sh down      stop the sshd this script started
#   sshd.sh status    exit 0 when it runs and a BatchMode login succeeds, 3 otherwise
#   sshd.sh env       print the SICKBAY_SLURM_SSH_* settings that point the adapter at it (source it)
#
# Settings (env): SICKBAY_STACK_DIR (<repo>/.cache/stack), SICKBAY_SSHD_PORT (2222).
# The login user is the current user; remote commands get SLURM_CONF of the local Slurm stack (SetEnv), the way a
# real control host has its slurm.conf in the default place.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_DIR="$(cd "$SCRIPT_DIR/../.." && pwd -P)"
STACK="${SICKBAY_STACK_DIR:-$REPO_DIR/.cache/stack}"
case "$STACK" in /*) ;; *) STACK="$(pwd -P)/$STACK" ;; esac
PORT="${SICKBAY_SSHD_PORT:-2222}"
DIR="$STACK/sshd"
CONF="$DIR/sshd_config"
PIDFILE="$DIR/sshd.pid"
HOST_KEY="$DIR/host_ed25519"
CLIENT_KEY="$DIR/client_ed25519"
AUTH_KEYS="$DIR/authorized_keys"
KNOWN_HOSTS="$DIR/known_hosts"
LOG="$DIR/sshd.log"
SLURM_CONF_PATH="$STACK/slurm/slurm.conf"
USER_NAME="$(id -un)"

log() { printf '[sshd.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

sshd_bin() {
    if [[ -x /usr/sbin/sshd ]]; then echo /usr/sbin/sshd; return 0; fi
    command -v sshd 2>/dev/null
}

ensure_installed() {
    sshd_bin >/dev/null && command -v ssh-keygen >/dev/null && return 0
    [[ "$(id -u)" == 0 ]] || die "openssh-server is missing and we are not root"
    log "installing openssh-server (apt-get)"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server
}

pid_running() {
    local pid
    [[ -s "$PIDFILE" ]] || return 1
    pid="$(tr -dc '0-9' <"$PIDFILE")"
    [[ -n "$pid" && -r "/proc/$pid/comm" ]] || return 1
    [[ "$(cat "/proc/$pid/comm")" == sshd ]] || return 1
    printf '%s\n' "$pid"
}

write_files() {
    mkdir -p "$DIR"
    chmod 0700 "$DIR"
    [[ -s "$HOST_KEY" ]] || ssh-keygen -q -t ed25519 -N '' -C sickbay-local-host -f "$HOST_KEY"
    [[ -s "$CLIENT_KEY" ]] || ssh-keygen -q -t ed25519 -N '' -C sickbay-adapter -f "$CLIENT_KEY"
    cp "$CLIENT_KEY.pub" "$AUTH_KEYS"
    chmod 0600 "$AUTH_KEYS" "$HOST_KEY" "$CLIENT_KEY"
    # Host key checking stays on in the client: it trusts exactly this host key for this host:port.
    printf '[127.0.0.1]:%s %s\n' "$PORT" "$(cut -d' ' -f1,2 "$HOST_KEY.pub")" >"$KNOWN_HOSTS"
    cat >"$CONF" <<EOF
# Rendered by deploy/local/sshd.sh; local testing only.
Port $PORT
ListenAddress 127.0.0.1
HostKey $HOST_KEY
PidFile $PIDFILE
AuthorizedKeysFile $AUTH_KEYS
AllowUsers $USER_NAME
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
X11Forwarding no
AllowTcpForwarding no
AllowAgentForwarding no
PermitTTY no
PrintMotd no
# The keys live under the checkout's .cache, which may sit below a world-writable /tmp (a CI
# clone): sshd's ownership check of every parent directory would refuse them there. This sshd
# listens on loopback only, for tests, with its own keys, so the check is off.
StrictModes no
SetEnv SLURM_CONF=$SLURM_CONF_PATH
LogLevel INFO
EOF
}

ssh_probe() {
    ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$KNOWN_HOSTS" \
        -o IdentitiesOnly=yes -o ConnectTimeout=3 -i "$CLIENT_KEY" -p "$PORT" "$USER_NAME@127.0.0.1" -- true \
        </dev/null >/dev/null 2>&1
}

cmd_up() {
    ensure_installed
    if pid_running >/dev/null; then
        log "sshd already running (pid $(pid_running), port $PORT)"
        ssh_probe || die "sshd runs but a login fails (see $LOG)"
        return 0
    fi
    write_files
    mkdir -p /run/sshd 2>/dev/null || true # privilege separation directory (Debian's sshd insists on it)
    local bin
    bin="$(sshd_bin)"
    "$bin" -t -f "$CONF" || die "sshd rejected $CONF"
    log "starting sshd on 127.0.0.1:$PORT"
    # -D: no daemonizing; -e: log to stderr (our log file). setsid keeps it out of the caller's process group.
    setsid "$bin" -D -e -f "$CONF" >>"$LOG" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    local i
    for ((i = 0; i < 50; i++)); do
        ssh_probe && { log "ready (pid $(pid_running))"; return 0; }
        sleep 0.1
    done
    tail -n 20 "$LOG" >&2 || true
    die "sshd did not accept a login within 5s"
}

cmd_down() {
    local pid i
    if pid="$(pid_running)"; then
        log "stopping sshd (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            pid_running >/dev/null || break
            sleep 0.1
        done
    fi
    rm -f "$PIDFILE"
}

cmd_status() {
    if pid_running >/dev/null && ssh_probe; then
        echo "sshd: running pid $(pid_running) on 127.0.0.1:$PORT"
        return 0
    fi
    echo "sshd: not running"
    return 3
}

cmd_env() {
    printf 'export SICKBAY_SLURM_MODE=ssh\n'
    printf 'export SICKBAY_SLURM_SSH_HOST=127.0.0.1\n'
    printf 'export SICKBAY_SLURM_SSH_PORT=%q\n' "$PORT"
    printf 'export SICKBAY_SLURM_SSH_USER=%q\n' "$USER_NAME"
    printf 'export SICKBAY_SLURM_SSH_KEY=%q\n' "$CLIENT_KEY"
    printf 'export SICKBAY_SLURM_SSH_KNOWN_HOSTS=%q\n' "$KNOWN_HOSTS"
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    env) cmd_env ;;
    *) sed -n '2,/^[^#]/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
