#!/usr/bin/env bash
# A 3-broker Apache Kafka cluster (KRaft; each node is broker + controller) on
# this host, for the scale-out test and benchmark: replication factor 3,
# min.insync.replicas 2, so one broker can stop without losing a write.
# It reuses the jars that deploy/local/kafka.sh caches (Maven Central, once) and
# runs beside the single-node dev broker on its own ports and data dirs.
#
# Usage: deploy/local/kafka-cluster.sh up | down [--purge] | status | bootstrap
#                                      | stop-broker N [--kill] | start-broker N
#
#   up             format (once) and start the brokers that are not running; wait until
#                  each answers and the controller quorum has all of them. Idempotent.
#   down           SIGTERM every broker (SIGKILL after 30 s). --purge also deletes the data.
#   status         exit 0 = all 3 running and answering, 3 = none running, 1 = some.
#   bootstrap      print the bootstrap list (127.0.0.1:29091,127.0.0.1:29092,127.0.0.1:29093).
#   stop-broker N  stop broker N (1..3) with SIGTERM, or SIGKILL with --kill (fault tests).
#   start-broker N start broker N again and wait until it answers.
#
# Settings (environment):
#   SICKBAY_STACK_DIR              <repo>/.cache/stack  (kafka-cluster/node-N/{data,logs,run} under it)
#   SICKBAY_DOWNLOAD_CACHE         ${XDG_CACHE_HOME:-$HOME/.cache}/sickbay (jars, shared with kafka.sh)
#   SICKBAY_KAFKA_VERSION          4.1.1
#   SICKBAY_KAFKA_CLUSTER_PORT     29091 (broker N listens on PORT+N-1; controllers on PORT+100+N-1;
#                                  below Linux's ephemeral range, 32768-60999, so no outgoing connection of
#                                  an already started broker can hold a port the next one must bind)
#   SICKBAY_KAFKA_CLUSTER_HEAP     "-Xms128m -Xmx768m"  (3 JVMs on a 2-core box: small; 512m ran out
#                                  of heap once a few hundred replicated partitions had piled up)
#   SICKBAY_KAFKA_START_TIMEOUT    180
#   JAVA_HOME                      optional; otherwise `java` from PATH
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "${SCRIPT_DIR}/../.." && pwd)"
CONF_SRC_DIR="${SCRIPT_DIR}/kafka"

STACK_DIR="${SICKBAY_STACK_DIR:-${REPO_DIR}/.cache/stack}"
DOWNLOAD_CACHE="${SICKBAY_DOWNLOAD_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/sickbay}"
KAFKA_VERSION="${SICKBAY_KAFKA_VERSION:-4.1.1}"
BASE_PORT="${SICKBAY_KAFKA_CLUSTER_PORT:-29091}"
HEAP="${SICKBAY_KAFKA_CLUSTER_HEAP:--Xms128m -Xmx768m}"
START_TIMEOUT="${SICKBAY_KAFKA_START_TIMEOUT:-180}"
STOP_TIMEOUT=30
HOST=127.0.0.1
NODES=(1 2 3)

CLUSTER_HOME="${STACK_DIR}/kafka-cluster"
LIBS_DIR="${DOWNLOAD_CACHE}/kafka-${KAFKA_VERSION}/libs"
LIBS_MARKER="${DOWNLOAD_CACHE}/kafka-${KAFKA_VERSION}/.complete"

log() { printf 'kafka-cluster: %s\n' "$*"; }
die() {
    printf 'kafka-cluster: ERROR: %s\n' "$*" >&2
    exit 1
}

client_port() { echo $((BASE_PORT + $1 - 1)); }
controller_port() { echo $((BASE_PORT + 100 + $1 - 1)); }
node_dir() { echo "${CLUSTER_HOME}/node-$1"; }
pid_file() { echo "$(node_dir "$1")/run/kafka.pid"; }
config_file() { echo "$(node_dir "$1")/run/server.properties"; }

bootstrap() {
    local n out=()
    for n in "${NODES[@]}"; do out+=("${HOST}:$(client_port "${n}")"); done
    (IFS=,; echo "${out[*]}")
}

voters() {
    local n out=()
    for n in "${NODES[@]}"; do out+=("${n}@${HOST}:$(controller_port "${n}")"); done
    (IFS=,; echo "${out[*]}")
}

java_bin() {
    if [[ -n "${JAVA_HOME:-}" && -x "${JAVA_HOME}/bin/java" ]]; then
        echo "${JAVA_HOME}/bin/java"
    else
        command -v java || die "java not found: run deploy/local/kafka.sh up once (it installs Java 17 and the jars)"
    fi
}

ensure_jars() {
    # kafka.sh owns the download (Maven Central, once, atomically); borrow it.
    if [[ ! -f "${LIBS_MARKER}" ]]; then
        # kafka.sh fetches them as part of `up` (and installs Java 17 if missing); the dev broker it
        # starts is the one every other test uses anyway.
        log "no cached Kafka ${KAFKA_VERSION} jars; fetching them with deploy/local/kafka.sh up"
        SICKBAY_KAFKA_VERSION="${KAFKA_VERSION}" bash "${SCRIPT_DIR}/kafka.sh" up
    fi
    [[ -f "${LIBS_MARKER}" ]] || die "Kafka jars missing at ${LIBS_DIR}"
}

port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/${HOST}/$1" 2>/dev/null; }

read_pid() {
    local f
    f="$(pid_file "$1")"
    if [[ -f "${f}" ]]; then tr -dc '0-9' <"${f}"; fi
}

is_running() {
    local pid
    pid="$(read_pid "$1")"
    [[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null &&
        tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null | grep -qF -- "kafka.Kafka $(config_file "$1")"
}

render_config() {
    local n="$1" dir
    dir="$(node_dir "${n}")"
    mkdir -p "${dir}/data" "${dir}/logs" "${dir}/run"
    cat >"$(config_file "${n}").tmp" <<EOC
# Broker ${n} of 3 of the local scale-out cluster (rendered by deploy/local/kafka-cluster.sh).
process.roles=broker,controller
node.id=${n}
controller.quorum.voters=$(voters)
listeners=PLAINTEXT://${HOST}:$(client_port "${n}"),CONTROLLER://${HOST}:$(controller_port "${n}")
advertised.listeners=PLAINTEXT://${HOST}:$(client_port "${n}")
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
# Two cores for three brokers and the workers: few threads each.
num.network.threads=2
num.io.threads=2
num.replica.fetchers=1
background.threads=2
log.dirs=${dir}/data
num.recovery.threads.per.data.dir=1
auto.create.topics.enable=false
delete.topic.enable=true
num.partitions=1
# Replication 3 and min ISR 2: with acks=all a write survives one broker down.
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
unclean.leader.election.enable=false
group.initial.rebalance.delay.ms=0
# A stopped broker is noticed within seconds (dev values; production keeps the defaults).
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=4500
replica.lag.time.max.ms=10000
log.retention.hours=24
log.segment.bytes=67108864
EOC
    mv "$(config_file "${n}").tmp" "$(config_file "${n}")"
}

format_storage() {
    local n="$1" cid="$2" dir
    dir="$(node_dir "${n}")"
    [[ -f "${dir}/data/meta.properties" ]] && return
    "${JAVA}" -Dlog4j2.configurationFile="${CONF_SRC_DIR}/log4j2.properties" -Dkafka.logs.dir="${dir}/logs" \
        -cp "${LIBS_DIR}/*" kafka.tools.StorageTool format -t "${cid}" -c "$(config_file "${n}")" \
        >"${dir}/logs/storage-format.log" 2>&1 || {
        cat "${dir}/logs/storage-format.log" >&2
        die "storage format failed for broker ${n}"
    }
}

cluster_id() {
    local f="${CLUSTER_HOME}/cluster.id"
    if [[ ! -s "${f}" ]]; then
        mkdir -p "${CLUSTER_HOME}"
        "${JAVA}" -cp "${LIBS_DIR}/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n1 >"${f}"
    fi
    cat "${f}"
}

start_node() {
    local n="$1" dir heap pid
    dir="$(node_dir "${n}")"
    if is_running "${n}"; then
        return 0
    fi
    port_open "$(client_port "${n}")" && die "port $(client_port "${n}") is taken by another process"
    read -r -a heap <<<"${HEAP}"
    [[ -f "${dir}/logs/kafka.out" ]] && mv -f "${dir}/logs/kafka.out" "${dir}/logs/kafka.out.prev"
    nohup setsid "${JAVA}" "${heap[@]}" -server -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError \
        -Djava.awt.headless=true -Dlog4j2.configurationFile="${CONF_SRC_DIR}/log4j2.properties" \
        -Dkafka.logs.dir="${dir}/logs" -cp "${LIBS_DIR}/*" kafka.Kafka "$(config_file "${n}")" \
        >"${dir}/logs/kafka.out" 2>&1 </dev/null 9>&- &
    pid=$!
    echo "${pid}" >"$(pid_file "${n}")"
    log "starting broker ${n} (pid ${pid}) on ${HOST}:$(client_port "${n}")"
}

wait_node() {
    local n="$1" t0="$2" pid
    pid="$(read_pid "${n}")"
    while :; do
        # The pid we just started: liveness only. is_running's cmdline check can read an empty or
        # half-exec'd /proc/<pid>/cmdline while nohup -> setsid -> java exec one another, and a
        # clean-clone CI run once took that instant for a broker that had died.
        if [[ -z "${pid}" ]] || ! kill -0 "${pid}" 2>/dev/null; then
            tail -n 30 "$(node_dir "${n}")/logs/kafka.out" >&2 || true
            die "broker ${n} exited during start-up"
        fi
        if port_open "$(client_port "${n}")" &&
            grep -q 'Kafka Server started' "$(node_dir "${n}")/logs/server.log" 2>/dev/null; then
            return 0
        fi
        ((SECONDS - t0 < START_TIMEOUT)) || die "broker ${n} not ready after ${START_TIMEOUT}s"
        sleep 0.5
    done
}

stop_node() {
    local n="$1" sig="${2:-TERM}" pid i
    pid="$(read_pid "${n}")"
    if ! is_running "${n}"; then
        rm -f "$(pid_file "${n}")"
        return 0
    fi
    kill "-${sig}" "${pid}" 2>/dev/null || true
    for ((i = 0; i < STOP_TIMEOUT * 4; i++)); do
        kill -0 "${pid}" 2>/dev/null || break
        sleep 0.25
    done
    if kill -0 "${pid}" 2>/dev/null; then
        log "broker ${n} still alive after ${STOP_TIMEOUT}s; SIGKILL"
        kill -KILL "${pid}" 2>/dev/null || true
        sleep 0.5
    fi
    rm -f "$(pid_file "${n}")"
    log "broker ${n} stopped (SIG${sig})"
}

with_lock() {
    mkdir -p "${CLUSTER_HOME}"
    exec 9>"${CLUSTER_HOME}/lock"
    flock -w 300 9 || die "timed out waiting for ${CLUSTER_HOME}/lock"
}

# A server.log from an earlier run must not count as "started": rotate it before a start.
fresh_log() {
    local f
    f="$(node_dir "$1")/logs/server.log"
    if [[ -f "${f}" ]] && ! is_running "$1"; then mv -f "${f}" "${f}.prev"; fi
}

cmd_up() {
    local t0=${SECONDS} n cid
    with_lock
    JAVA="$(java_bin)"
    ensure_jars
    cid="$(cluster_id)"
    for n in "${NODES[@]}"; do
        render_config "${n}"
        format_storage "${n}" "${cid}"
        fresh_log "${n}"
        start_node "${n}"
    done
    for n in "${NODES[@]}"; do wait_node "${n}" "${t0}"; done
    log "ready: $(bootstrap) ($((SECONDS - t0))s)"
    echo "bootstrap.servers=$(bootstrap)"
}

cmd_down() {
    local n
    with_lock
    # SIGTERM to all at once: stopped one by one, the last broker's controlled shutdown waits
    # for a controller quorum that is already gone.
    for n in "${NODES[@]}"; do
        if is_running "${n}"; then kill -TERM "$(read_pid "${n}")" 2>/dev/null || true; fi
    done
    for n in "${NODES[@]}"; do stop_node "${n}" TERM; done
    if [[ "${1:-}" == "--purge" ]]; then
        rm -rf "${CLUSTER_HOME}"
        log "purged ${CLUSTER_HOME}"
    fi
}

cmd_status() {
    local n up=0
    for n in "${NODES[@]}"; do
        if is_running "${n}" && port_open "$(client_port "${n}")"; then
            up=$((up + 1))
            log "broker ${n}: running (pid $(read_pid "${n}")) on ${HOST}:$(client_port "${n}")"
        else
            log "broker ${n}: stopped"
        fi
    done
    ((up == ${#NODES[@]})) && return 0
    ((up == 0)) && return 3
    return 1
}

check_node() {
    [[ "${1:-}" =~ ^[123]$ ]] || die "broker number must be 1, 2 or 3, not '${1:-}'"
}

main() {
    local cmd="${1:-}"
    [[ $# -gt 0 ]] && shift
    case "${cmd}" in
    up) cmd_up ;;
    down) cmd_down "$@" ;;
    status) cmd_status ;;
    bootstrap) bootstrap ;;
    stop-broker)
        check_node "${1:-}"
        if [[ "${2:-}" == "--kill" ]]; then stop_node "$1" KILL; else stop_node "$1" TERM; fi
        ;;
    start-broker)
        check_node "${1:-}"
        JAVA="$(java_bin)"
        local t0=${SECONDS}
        fresh_log "$1"
        start_node "$1"
        wait_node "$1" "${t0}"
        log "broker $1 ready"
        ;;
    -h | --help | help) sed -n '7,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' ;;
    *)
        sed -n '7,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
    esac
}

main "$@"
