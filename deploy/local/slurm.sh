#!/usr/bin/env bash
# Local Slurm 22.05 cluster for sickbay: munged, one slurmctld and 4 slurmd (gpu-01..gpu-04) on this host.
# No Docker, no systemd; must run as root (Debian 12, slurm-wlm + munge).
#
#   slurm.sh up               install if missing, start munged/slurmctld/slurmd x4, wait until all nodes respond
#   slurm.sh down [--all] [--purge]
#                             requeue running jobs (cancel non-requeueable ones), stop slurmctld + slurmd x4
#                             and leftover slurmstepd/job processes; state (pending jobs, drains) is kept;
#                             --all also stops munged, --purge deletes $STACK/slurm
#   slurm.sh status           daemons + sinfo; exit 0 if the controller answers, 3 otherwise
#   slurm.sh env              print the env file (source it: export SLURM_CONF=...)
#
# Settings (env): SICKBAY_STACK_DIR (<repo>/.cache/stack), SICKBAY_SLURMCTLD_PORT (16817),
#   SICKBAY_SLURMD_PORT_BASE (17001: gpu-01 17001 ... gpu-04 17004), SICKBAY_SLURM_CLUSTER (sickbay),
#   SICKBAY_SLURM_CRED_EXPIRE (30: seconds a requeued job waits before it is eligible again; Slurm default 120),
#   SICKBAY_SLURM_READY_TIMEOUT (60).
set -euo pipefail
shopt -u patsub_replacement 2>/dev/null || true # keep '&' literal in ${var//pat/repl} (bash 5.2)

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_DIR="$(cd "$SCRIPT_DIR/../.." && pwd -P)"
TEMPLATE="$SCRIPT_DIR/slurm/slurm.conf.template"

STACK_DIR="${SICKBAY_STACK_DIR:-$REPO_DIR/.cache/stack}"
CTLD_PORT="${SICKBAY_SLURMCTLD_PORT:-16817}"
SLURMD_PORT_BASE="${SICKBAY_SLURMD_PORT_BASE:-17001}"
CLUSTER="${SICKBAY_SLURM_CLUSTER:-sickbay}"
CRED_EXPIRE="${SICKBAY_SLURM_CRED_EXPIRE:-30}"
READY_TIMEOUT="${SICKBAY_SLURM_READY_TIMEOUT:-60}"
NODES=(gpu-01 gpu-02 gpu-03 gpu-04)

log() { printf '[slurm.sh] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Absolute stack dir (the directory may not exist yet).
abs_path() {
    case "$1" in
        /*) printf '%s\n' "$1" ;;
        *) printf '%s/%s\n' "$(pwd -P)" "$1" ;;
    esac
}
STACK="$(abs_path "$STACK_DIR")"
STACK="${STACK%/}"
[[ "$STACK" =~ [[:space:]] ]] && { echo "[slurm.sh] ERROR: SICKBAY_STACK_DIR must not contain whitespace (slurm.conf paths): $STACK" >&2; exit 1; }
SDIR="$STACK/slurm"
CONF="$SDIR/slurm.conf"
ENV_FILE="$SDIR/env"
RUN="$SDIR/run"
LOGD="$SDIR/log"
export SLURM_CONF="$CONF"
export PATH="$PATH:/usr/sbin:/sbin"
CONF_CHANGED=0

now_ms() { date +%s%3N; }

# ---------------------------------------------------------------- processes

# pid_alive PID NAME: the process exists and its comm is NAME (guards against recycled PIDs).
pid_alive() {
    local pid="$1" name="$2" comm
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ -r "/proc/$pid/comm" ]] || return 1
    comm="$(cat "/proc/$pid/comm" 2>/dev/null)" || return 1
    [[ "$comm" == "$name" ]] || return 1
    # A zombie (exited, not yet reaped by PID 1) is dead for our purposes.
    local stat
    stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [[ "${stat%% *}" != [ZX] ]]
}

# pidfile_alive FILE NAME: prints the PID when the pid file names a live NAME process.
pidfile_alive() {
    local file="$1" name="$2" pid
    [[ -s "$file" ]] || return 1
    pid="$(tr -dc '0-9' <"$file")"
    pid_alive "$pid" "$name" || return 1
    printf '%s\n' "$pid"
}

ctld_pid() { pidfile_alive "$RUN/slurmctld.pid" slurmctld; }
slurmd_pid() { pidfile_alive "$RUN/slurmd-$1.pid" slurmd; }

# stop_pid PID NAME [WAIT_S]: SIGTERM, wait, SIGKILL.
stop_pid() {
    local pid="$1" name="$2" wait_s="${3:-10}" i
    pid_alive "$pid" "$name" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < wait_s * 10; i++)); do
        pid_alive "$pid" "$name" || return 0
        sleep 0.1
    done
    log "$name pid $pid ignored SIGTERM for ${wait_s}s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        pid_alive "$pid" "$name" || return 0
        sleep 0.1
    done
    log "WARNING: $name pid $pid still alive after SIGKILL"
}

# environ_of PID: the process environment, one VAR=value per line (empty when unreadable/gone).
environ_of() { tr '\0' '\n' 2>/dev/null <"/proc/$1/environ" || true; }

# Processes of this stack: our daemons are started with SICKBAY_SLURM_STACK=$STACK and SLURM_CONF=$CONF;
# slurmd scrubs its environment for slurmstepd but sets SLURM_CONF=$CONF there and in every job process.
# Callers filter by comm (slurmd, slurmctld, slurmstepd) or by SLURM_JOB_ID.
stack_pids() {
    local d pid env
    for d in /proc/[0-9]*; do
        pid="${d#/proc/}"
        [[ "$pid" == "$$" ]] && continue
        env="$(environ_of "$pid")"
        [[ -n "$env" ]] || continue
        if grep -qxF -e "SICKBAY_SLURM_STACK=$STACK" -e "SLURM_CONF=$CONF" <<<"$env"; then
            printf '%s\n' "$pid"
        fi
    done
}

# descendants PID...: all descendants of the given PIDs (not the PIDs themselves).
descendants() {
    local -a queue=("$@") out=()
    local p c
    while ((${#queue[@]})); do
        p="${queue[0]}"
        queue=("${queue[@]:1}")
        # shellcheck disable=SC2013 # children is a space-separated list
        for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do
            out+=("$c")
            queue+=("$c")
        done
    done
    ((${#out[@]})) && printf '%s\n' "${out[@]}"
    return 0
}

# Our own shell and its ancestors: never kill those (a caller may have sourced the env file).
self_and_ancestors() {
    local p=$$
    while [[ -n "$p" && "$p" != 0 ]]; do
        printf '%s\n' "$p"
        p="$(awk '/^PPid:/{print $2}' "/proc/$p/status" 2>/dev/null || true)"
        [[ "$p" == 1 ]] && { echo 1; break; }
    done
}

# slurmstepd processes of this stack, their descendants, and orphaned job processes (SLURM_JOB_ID set,
# SLURM_CONF=$CONF) left behind after their slurmstepd died.
stepd_and_job_pids() {
    local -a stepds=() jobs=()
    local pid
    for pid in $(stack_pids); do
        case "$(cat "/proc/$pid/comm" 2>/dev/null || true)" in
            slurmstepd) stepds+=("$pid") ;;
            slurmd | slurmctld) ;;
            *) environ_of "$pid" | grep -q '^SLURM_JOB_ID=' && jobs+=("$pid") ;;
        esac
    done
    if ((${#stepds[@]})); then
        printf '%s\n' "${stepds[@]}"
        descendants "${stepds[@]}"
    fi
    ((${#jobs[@]})) && printf '%s\n' "${jobs[@]}"
    return 0
}

kill_jobs() {
    local -a pids=()
    local pid
    local exclude
    exclude="$(self_and_ancestors)"
    while read -r pid; do
        [[ -n "$pid" ]] || continue
        grep -qxF "$pid" <<<"$exclude" && continue
        pids+=("$pid")
    done < <(stepd_and_job_pids | sort -un)
    ((${#pids[@]})) || return 0
    log "killing ${#pids[@]} leftover slurmstepd/job process(es): ${pids[*]}"
    kill -TERM "${pids[@]}" 2>/dev/null || true
    sleep 1
    kill -KILL "${pids[@]}" 2>/dev/null || true
}

# ---------------------------------------------------------------- install / munge

ensure_installed() {
    local missing=0 b
    for b in slurmctld slurmd munged munge unmunge sinfo scontrol sbatch; do
        command -v "$b" >/dev/null 2>&1 || [[ -x "/usr/sbin/$b" ]] || missing=1
    done
    ((missing)) || return 0
    [[ "$(id -u)" == 0 ]] || die "slurm-wlm/munge are missing and we are not root"
    log "installing slurm-wlm and munge (apt-get)"
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y slurm-wlm munge
}

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

ensure_munge() {
    if munge_ok; then
        return 0
    fi
    getent passwd munge >/dev/null || die "user 'munge' does not exist (is the munge package installed?)"
    mkdir -p /etc/munge /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge
    chmod 0700 /etc/munge /var/log/munge /var/lib/munge
    chmod 0755 /run/munge
    if [[ ! -s /etc/munge/munge.key ]]; then
        log "creating /etc/munge/munge.key"
        if command -v mungekey >/dev/null 2>&1 || [[ -x /usr/sbin/mungekey ]]; then
            rm -f /etc/munge/munge.key
            PATH="$PATH:/usr/sbin" mungekey --create --keyfile=/etc/munge/munge.key
        else
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
        fi
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 0600 /etc/munge/munge.key
    local pid
    if pid="$(pidfile_alive /run/munge/munged.pid munged)"; then
        log "munged pid $pid is running but munge -n | unmunge fails; restarting it"
        stop_pid "$pid" munged 5
    fi
    log "starting munged"
    # --force: a crashed munged leaves its socket behind, which makes a plain start refuse.
    runuser -u munge -- /usr/sbin/munged --force
    local i
    for ((i = 0; i < 50; i++)); do
        munge_ok && { log "munged up (pid $(cat /run/munge/munged.pid 2>/dev/null || echo '?'))"; return 0; }
        sleep 0.1
    done
    tail -n 20 /var/log/munge/munged.log >&2 2>/dev/null || true
    die "munged did not come up (munge -n | unmunge still fails)"
}

# ---------------------------------------------------------------- config

render_conf() {
    [[ -r "$TEMPLATE" ]] || die "template not found: $TEMPLATE"
    local tmp="$CONF.tmp.$$" line i
    : >"$tmp"
    while IFS= read -r line || [[ -n "$line" ]]; do
        line="${line//@STACK@/$STACK}"
        line="${line//@CLUSTER@/$CLUSTER}"
        line="${line//@CTLD_PORT@/$CTLD_PORT}"
        line="${line//@SLURMD_PORT_BASE@/$SLURMD_PORT_BASE}"
        line="${line//@CRED_EXPIRE@/$CRED_EXPIRE}"
        for i in 1 2 3 4; do
            line="${line//@SLURMD_PORT_$i@/$((SLURMD_PORT_BASE + i - 1))}"
        done
        printf '%s\n' "$line" >>"$tmp"
    done <"$TEMPLATE"
    if grep -nE '@[A-Z_0-9]+@' "$tmp" >&2; then
        rm -f "$tmp"
        die "unreplaced placeholder(s) in rendered slurm.conf (see above)"
    fi
    if grep -nE '^[[:space:]]*[A-Za-z]+=[[:space:]]*$' "$tmp" >&2; then
        rm -f "$tmp"
        die "empty Key= line(s) in rendered slurm.conf (fatal for slurmctld)"
    fi
    CONF_CHANGED=0
    if [[ -f "$CONF" ]] && cmp -s "$tmp" "$CONF"; then
        rm -f "$tmp"
        return 0
    fi
    mv -f "$tmp" "$CONF"
    chmod 0644 "$CONF"
    CONF_CHANGED=1
}

write_env() {
    printf 'export SLURM_CONF=%q\n' "$CONF" >"$ENV_FILE"
}

check_ports_free() {
    command -v ss >/dev/null 2>&1 || return 0
    local port
    for port in "$@"; do
        if ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then
            die "TCP port $port is already in use by another process (set SICKBAY_SLURMCTLD_PORT / SICKBAY_SLURMD_PORT_BASE)"
        fi
    done
}

# ---------------------------------------------------------------- up

node_states() { timeout 10 sinfo -h -N -o '%N %T' 2>/dev/null || true; }

# All 4 nodes present and responding (idle, mixed, allocated, drained, draining, completing, ...).
nodes_ready() {
    local states n st ok=0
    states="$(node_states)"
    for n in "${NODES[@]}"; do
        st="$(awk -v n="$n" '$1 == n {print $2; exit}' <<<"$states")"
        [[ -n "$st" ]] || return 1
        case "$st" in
            *'*'* | down* | unknown* | future* | not_responding* | fail* | inval* | power* | boot* | reboot*) return 1 ;;
        esac
        ok=$((ok + 1))
    done
    ((ok == ${#NODES[@]}))
}

dump_logs() {
    local f
    log "--- sinfo ---"
    node_states >&2 || true
    for f in "$LOGD/slurmctld.log" "$LOGD"/slurmd-gpu-0*.log; do
        [[ -f "$f" ]] || continue
        log "--- tail $f ---"
        grep -vE 'pmix|MPI: ' "$f" | tail -n 25 >&2 || true
    done
}

start_slurmctld() {
    local pid
    if pid="$(ctld_pid)"; then
        log "slurmctld already running (pid $pid)"
        return 0
    fi
    check_ports_free "$CTLD_PORT"
    rm -f "$RUN/slurmctld.pid"
    # The state dir remembers its cluster name; a different ClusterName is a fatal "CLUSTER NAME MISMATCH".
    if [[ -f "$SDIR/state/clustername" ]] && [[ "$(cat "$SDIR/state/clustername")" != "$CLUSTER" ]]; then
        log "state dir belongs to cluster '$(cat "$SDIR/state/clustername")', not '$CLUSTER': moving it to state.old"
        rm -rf "$SDIR/state.old"
        mv "$SDIR/state" "$SDIR/state.old"
        mkdir -p "$SDIR/state"
    fi
    # No -c: jobs (and DOWN/DRAIN node states with reasons) are recovered from StateSaveLocation.
    # -i: ignore errors in state files instead of refusing to start (stale or incompatible state).
    log "starting slurmctld (port $CTLD_PORT)"
    SICKBAY_SLURM_STACK="$STACK" /usr/sbin/slurmctld -f "$CONF" -i
}

start_slurmd() {
    local n="$1" idx="$2" pid
    if pid="$(slurmd_pid "$n")"; then
        log "slurmd $n already running (pid $pid)"
        return 0
    fi
    check_ports_free "$((SLURMD_PORT_BASE + idx))"
    rm -f "$RUN/slurmd-$n.pid"
    mkdir -p "$SDIR/spool/$n"
    log "starting slurmd $n (port $((SLURMD_PORT_BASE + idx)))"
    SICKBAY_SLURM_STACK="$STACK" /usr/sbin/slurmd -f "$CONF" -N "$n"
}

wait_pidfile() {
    local name="$1" file="$2" i
    for ((i = 0; i < 100; i++)); do
        pidfile_alive "$file" "$name" >/dev/null && return 0
        sleep 0.1
    done
    return 1
}

cmd_up() {
    local t0
    t0="$(now_ms)"
    [[ "$(id -u)" == 0 ]] || die "run as root (slurmd/slurmctld run as SlurmUser=root here)"
    ensure_installed
    ensure_munge
    mkdir -p "$SDIR/state" "$LOGD" "$RUN" "$SDIR/spool"
    render_conf
    write_env
    if ((CONF_CHANGED)) && { ctld_pid >/dev/null || slurmd_pid gpu-01 >/dev/null; }; then
        log "slurm.conf changed while daemons run: restarting them so they pick it up"
        stop_all
    fi

    start_slurmctld
    wait_pidfile slurmctld "$RUN/slurmctld.pid" || { dump_logs; die "slurmctld did not start"; }
    local i
    for i in "${!NODES[@]}"; do
        start_slurmd "${NODES[$i]}" "$i"
    done
    for i in "${NODES[@]}"; do
        wait_pidfile slurmd "$RUN/slurmd-$i.pid" || { dump_logs; die "slurmd $i did not start"; }
    done

    local deadline=$(($(date +%s) + READY_TIMEOUT))
    until nodes_ready; do
        if (($(date +%s) >= deadline)); then
            dump_logs
            die "nodes not ready after ${READY_TIMEOUT}s"
        fi
        sleep 0.2
    done
    local t1
    t1="$(now_ms)"
    log "pids: slurmctld=$(ctld_pid) $(for n in "${NODES[@]}"; do printf '%s=%s ' "$n" "$(slurmd_pid "$n")"; done)"
    node_states | sed 's/^/[slurm.sh]   /' >&2
    log "ready in $(((t1 - t0) / 1000)).$(printf '%03d' $(((t1 - t0) % 1000)))s; SLURM_CONF=$CONF (source $ENV_FILE)"
}

# ---------------------------------------------------------------- down

# Running jobs cannot survive `down` (their processes die). Left alone they would be saved as RUNNING and
# come back after `up` as ghost jobs that hold their nodes forever (slurmctld only purges a missing batch
# job when the node's boot time is newer than the job). So while the controller still answers, requeue
# them (Restarts+1, PENDING) like a node failure with JobRequeue=1 would; cancel those with Requeue=0.
end_running_jobs() {
    local ids id i
    ids="$(timeout 10 squeue -h -t RUNNING,SUSPENDED,CONFIGURING,STAGE_OUT -o '%i' 2>/dev/null)" || return 0
    [[ -n "$ids" ]] || return 0
    for id in $ids; do
        if timeout 10 scontrol requeue "$id" >/dev/null 2>&1; then
            log "requeued running job $id"
        elif timeout 10 scancel "$id" >/dev/null 2>&1; then
            log "cancelled running job $id (not requeueable)"
        else
            log "WARNING: could not requeue or cancel job $id"
        fi
    done
    for ((i = 0; i < 150; i++)); do
        [[ -z "$(timeout 10 squeue -h -t COMPLETING -o '%i' 2>/dev/null || true)" ]] && return 0
        sleep 0.1
    done
    log "WARNING: jobs still COMPLETING after 15s; stopping anyway"
}

# Order: end running jobs through slurmctld; stop slurmctld (saves state) before the slurmd so its
# shutdown does not wait on slurmd that are already gone; then the slurmd; then any slurmstepd/job
# processes left behind.
stop_all() {
    local n pid t0
    t0="$(now_ms)"
    if ctld_pid >/dev/null; then end_running_jobs; fi
    if pid="$(ctld_pid)"; then
        log "stopping slurmctld (pid $pid)"
        stop_pid "$pid" slurmctld 15
    fi
    for pid in $(stack_pids); do
        case "$(cat "/proc/$pid/comm" 2>/dev/null || true)" in
            slurmctld) log "stopping stray slurmctld pid $pid"; stop_pid "$pid" slurmctld 15 ;;
        esac
    done
    rm -f "$RUN/slurmctld.pid"
    for n in "${NODES[@]}"; do
        if pid="$(slurmd_pid "$n")"; then
            log "stopping slurmd $n (pid $pid)"
            kill -TERM "$pid" 2>/dev/null || true
        fi
    done
    for n in "${NODES[@]}"; do
        if pid="$(slurmd_pid "$n")"; then stop_pid "$pid" slurmd 10; fi
        rm -f "$RUN/slurmd-$n.pid"
    done
    # slurmd of this stack without a (valid) pid file.
    for pid in $(stack_pids); do
        case "$(cat "/proc/$pid/comm" 2>/dev/null || true)" in
            slurmd) log "stopping stray slurmd pid $pid"; stop_pid "$pid" slurmd 10 ;;
        esac
    done
    kill_jobs
    local t1
    t1="$(now_ms)"
    log "stopped in $(((t1 - t0) / 1000)).$(printf '%03d' $(((t1 - t0) % 1000)))s"
}

cmd_down() {
    local all=0 purge=0 a
    for a in "$@"; do
        case "$a" in
            --all) all=1 ;;
            --purge) purge=1 ;;
            *) log "down: ignoring unknown option $a (known: --all, --purge)" ;;
        esac
    done
    stop_all
    if ((all)); then
        local pid
        if pid="$(pidfile_alive /run/munge/munged.pid munged)"; then
            log "stopping munged (pid $pid)"
            stop_pid "$pid" munged 5
        fi
    fi
    if ((purge)); then
        log "purging $SDIR"
        rm -rf "$SDIR"
    fi
    log "down"
}

# ---------------------------------------------------------------- status / env

cmd_status() {
    local pid n
    echo "stack:      $STACK"
    echo "SLURM_CONF: $CONF"
    if munge_ok; then echo "munged:     up (pid $(cat /run/munge/munged.pid 2>/dev/null || echo '?'))"; else echo "munged:     DOWN"; fi
    if pid="$(ctld_pid)"; then echo "slurmctld:  running pid $pid (port $CTLD_PORT)"; else echo "slurmctld:  not running"; fi
    local i
    for i in "${!NODES[@]}"; do
        n="${NODES[$i]}"
        if pid="$(slurmd_pid "$n")"; then
            echo "slurmd $n: running pid $pid (port $((SLURMD_PORT_BASE + i)))"
        else
            echo "slurmd $n: not running"
        fi
    done
    [[ -f "$CONF" ]] || { echo "controller: no slurm.conf (never started)"; return 3; }
    local out
    if out="$(timeout 15 sinfo -N -o '%N %P %T %E' 2>&1)"; then
        echo "--- sinfo ---"
        printf '%s\n' "$out"
        return 0
    fi
    echo "controller: not answering ($out)"
    return 3
}

cmd_env() {
    if [[ -f "$ENV_FILE" ]]; then
        cat "$ENV_FILE"
    else
        printf 'export SLURM_CONF=%q\n' "$CONF" # same line `up` writes to $STACK/slurm/env
    fi
}

usage() {
    sed -n '2,/^[^#]/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
}

main() {
    local cmd="${1:-}"
    [[ $# -gt 0 ]] && shift
    case "$cmd" in
        up) cmd_up "$@" ;;
        down) cmd_down "$@" ;;
        status) cmd_status "$@" ;;
        env) cmd_env "$@" ;;
        -h | --help | help) usage ;;
        *) usage >&2; exit 2 ;;
    esac
}

main "$@"
