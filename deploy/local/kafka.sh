#!/usr/bin/env bash
# Local single-node Apache Kafka (KRaft, combined broker+controller) for
# sickbay dev, tests and CI. No Docker: the broker jars come from Maven Central
# (deploy/local/kafka/pom.xml) and run on the local JVM (Java 17+).
#
# Usage: deploy/local/kafka.sh up | down [--purge] | status | logs [-f] [LINES]
#
#   up       fetch jars once, format storage once, start the broker in the
#            background and wait until it is ready. Idempotent.
#   down     SIGTERM (SIGKILL after 30 s), remove the pid file. Idempotent.
#            --purge also deletes the data dir (topics, offsets, cluster id).
#   status   exit 0 = running and answering, 3 = stopped,
#            1 = process alive but the port does not answer (starting/hung).
#   logs     tail of the broker log (server.log); -f to follow.
#
# Settings (environment):
#   SICKBAY_STACK_DIR              <repo>/.cache/stack  (kafka/{data,logs,run} under it)
#   SICKBAY_DOWNLOAD_CACHE         ${XDG_CACHE_HOME:-$HOME/.cache}/sickbay (jars)
#   SICKBAY_KAFKA_VERSION          4.1.1
#   SICKBAY_KAFKA_PORT             39092  (client listener, 127.0.0.1 only)
#   SICKBAY_KAFKA_CONTROLLER_PORT  39093
#   SICKBAY_KAFKA_HEAP             "-Xms256m -Xmx768m"
#   SICKBAY_KAFKA_START_TIMEOUT    300 (seconds to wait for readiness: a data dir holding a test run's
#                                  topics replays them for minutes on 2 cores)
#   JAVA_HOME                      optional; otherwise `java` from PATH
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "${SCRIPT_DIR}/../.." && pwd)"
CONF_SRC_DIR="${SCRIPT_DIR}/kafka"

STACK_DIR="${SICKBAY_STACK_DIR:-${REPO_DIR}/.cache/stack}"
DOWNLOAD_CACHE="${SICKBAY_DOWNLOAD_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/sickbay}"
KAFKA_VERSION="${SICKBAY_KAFKA_VERSION:-4.1.1}"
PORT="${SICKBAY_KAFKA_PORT:-39092}"
CONTROLLER_PORT="${SICKBAY_KAFKA_CONTROLLER_PORT:-39093}"
HEAP="${SICKBAY_KAFKA_HEAP:--Xms256m -Xmx768m}"
START_TIMEOUT="${SICKBAY_KAFKA_START_TIMEOUT:-300}"
STOP_TIMEOUT=30
HOST=127.0.0.1

KAFKA_HOME="${STACK_DIR}/kafka"
DATA_DIR="${KAFKA_HOME}/data"
LOG_DIR="${KAFKA_HOME}/logs"
RUN_DIR="${KAFKA_HOME}/run"
PID_FILE="${RUN_DIR}/kafka.pid"
CONFIG_FILE="${RUN_DIR}/server.properties"
SERVER_LOG="${LOG_DIR}/server.log"
CONSOLE_LOG="${LOG_DIR}/kafka.out"

LIB_ROOT="${DOWNLOAD_CACHE}/kafka-${KAFKA_VERSION}"
LIBS_DIR="${LIB_ROOT}/libs"
LIBS_MARKER="${LIB_ROOT}/.complete"

log() { printf 'kafka: %s\n' "$*"; }
die() {
    printf 'kafka: ERROR: %s\n' "$*" >&2
    exit 1
}

usage() {
    sed -n '6,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

as_root() {
    if [[ ${EUID} -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

apt_install() {
    command -v apt-get >/dev/null 2>&1 ||
        die "missing $*; install Java 17+ and Maven 3.8+ yourself (no apt-get here)"
    log "installing $* with apt-get"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

java_bin() {
    if [[ -n "${JAVA_HOME:-}" && -x "${JAVA_HOME}/bin/java" ]]; then
        printf '%s\n' "${JAVA_HOME}/bin/java"
    else
        command -v java || true
    fi
}

# Major version of `java -version`: "17.0.15" -> 17, "1.8.0_392" -> 8.
java_major() {
    local ver
    ver="$("$1" -version 2>&1 | awk -F'"' '/version/ { print $2; exit }')"
    [[ -n "${ver}" ]] || {
        echo 0
        return
    }
    if [[ "${ver}" == 1.* ]]; then
        ver="${ver#1.}"
    fi
    ver="${ver%%[.+_-]*}"
    [[ "${ver}" =~ ^[0-9]+$ ]] || ver=0
    echo "${ver}"
}

JAVA=""
ensure_tools() {
    local need=()
    [[ -n "$(java_bin)" ]] || need+=(openjdk-17-jre-headless)
    if [[ ! -f "${LIBS_MARKER}" ]] && ! command -v mvn >/dev/null 2>&1; then
        need+=(maven)
    fi
    if ((${#need[@]})); then
        apt_install "${need[@]}"
    fi
    JAVA="$(java_bin)"
    [[ -n "${JAVA}" ]] || die "java not found after install"
    local major
    major="$(java_major "${JAVA}")"
    if ((major < 17)); then
        die "Kafka ${KAFKA_VERSION} needs Java 17+, but ${JAVA} is Java ${major}.
       Install it (apt-get install openjdk-17-jre-headless) and put it first on
       PATH or set JAVA_HOME (e.g. JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64)."
    fi
}

# Fetch the runtime jars once per version. Downloads go to a temp dir that is
# renamed into place, and the marker is written last, so an interrupted run is
# never mistaken for a complete one.
ensure_jars() {
    if [[ -f "${LIBS_MARKER}" && -d "${LIBS_DIR}" ]]; then
        return
    fi
    mkdir -p "${LIB_ROOT}"
    # Leftovers of an interrupted fetch (we hold the lock, so none is active).
    rm -rf "${LIB_ROOT}"/.fetch.*
    local work t0
    work="$(mktemp -d "${LIB_ROOT}/.fetch.XXXXXX")"
    # shellcheck disable=SC2064  # expand now: remove this temp dir on any exit
    trap "rm -rf '${work}'" EXIT
    # Run Maven on a copy of the POM so nothing (target/) lands in the repo.
    cp "${CONF_SRC_DIR}/pom.xml" "${work}/pom.xml"
    log "fetching Kafka ${KAFKA_VERSION} jars from Maven Central into ${LIBS_DIR} (once)"
    t0=${SECONDS}
    # Output goes to a file (Debian's mvn prints stray ANSI resets even with -q -B)
    # and is shown only on failure.
    if ! (cd "${work}" && mvn -q -B dependency:copy-dependencies \
        -DincludeScope=runtime -Dstyle.color=never \
        -Dkafka.version="${KAFKA_VERSION}" \
        -DoutputDirectory="${work}/libs") >"${work}/mvn.log" 2>&1; then
        cat "${work}/mvn.log" >&2
        die "mvn dependency:copy-dependencies failed for kafka_2.13:${KAFKA_VERSION} (Maven Central reachable? proxy in ~/.m2/settings.xml?)"
    fi
    compgen -G "${work}/libs/kafka_2.13-${KAFKA_VERSION}.jar" >/dev/null ||
        die "kafka_2.13-${KAFKA_VERSION}.jar missing after download"
    rm -rf "${LIBS_DIR}"
    mv "${work}/libs" "${LIBS_DIR}"
    {
        echo "kafka.version=${KAFKA_VERSION}"
        echo "fetched=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "jars=$(find "${LIBS_DIR}" -name '*.jar' | wc -l)"
    } >"${LIBS_MARKER}"
    rm -rf "${work}"
    trap - EXIT
    log "jars ready ($(find "${LIBS_DIR}" -name '*.jar' | wc -l) files, $((SECONDS - t0))s)"
}

# TCP connect test (bash /dev/tcp), bounded so it can never hang.
port_open() {
    timeout 2 bash -c "exec 3<>/dev/tcp/${HOST}/$1" 2>/dev/null
}

read_pid() {
    local pid=""
    if [[ -f "${PID_FILE}" ]]; then
        pid="$(tr -dc '0-9' <"${PID_FILE}")"
    fi
    printf '%s\n' "${pid}"
}

# True when $1 is a live process running our broker (guards against PID reuse).
is_our_broker() {
    local pid="$1"
    [[ -n "${pid}" ]] || return 1
    kill -0 "${pid}" 2>/dev/null || return 1
    [[ -r "/proc/${pid}/cmdline" ]] || return 0 # no procfs: trust kill -0
    tr '\0' ' ' <"/proc/${pid}/cmdline" | grep -qF -- "kafka.Kafka ${CONFIG_FILE}"
}

port_owner() {
    if command -v ss >/dev/null 2>&1; then
        ss -Hltnp "sport = :$1" 2>/dev/null | head -n 3
    fi
}

render_config() {
    local tpl
    tpl="$(<"${CONF_SRC_DIR}/server.properties.template")"
    tpl="${tpl//@PORT@/${PORT}}"
    tpl="${tpl//@CONTROLLER_PORT@/${CONTROLLER_PORT}}"
    tpl="${tpl//@DATA_DIR@/${DATA_DIR}}"
    printf '%s\n' "${tpl}" >"${CONFIG_FILE}.tmp"
    mv "${CONFIG_FILE}.tmp" "${CONFIG_FILE}"
}

java_log_opts() {
    printf '%s\n' "-Dlog4j2.configurationFile=${CONF_SRC_DIR}/log4j2.properties" \
        "-Dkafka.logs.dir=${LOG_DIR}"
}

format_storage() {
    if [[ -f "${DATA_DIR}/meta.properties" ]]; then
        return
    fi
    local cid logopts
    mapfile -t logopts < <(java_log_opts)
    cid="$("${JAVA}" "${logopts[@]}" -cp "${LIBS_DIR}/*" kafka.tools.StorageTool random-uuid)"
    log "formatting ${DATA_DIR} (cluster id ${cid})"
    if ! "${JAVA}" "${logopts[@]}" -cp "${LIBS_DIR}/*" kafka.tools.StorageTool format \
        -t "${cid}" -c "${CONFIG_FILE}" >"${LOG_DIR}/storage-format.log" 2>&1; then
        cat "${LOG_DIR}/storage-format.log" >&2
        die "kafka-storage format failed"
    fi
}

print_tail() {
    local f
    for f in "${CONSOLE_LOG}" "${SERVER_LOG}"; do
        if [[ -s "${f}" ]]; then
            printf -- '----- last 40 lines of %s -----\n' "${f}" >&2
            tail -n 40 "${f}" >&2
        fi
    done
}

# Wait until "Kafka Server started" is logged after byte offset $2 of server.log
# and the client port accepts connections.
wait_ready() {
    local pid="$1" offset="$2" t0="$3" size
    while :; do
        if ! kill -0 "${pid}" 2>/dev/null; then
            print_tail
            die "broker process ${pid} exited during start-up"
        fi
        if [[ -f "${SERVER_LOG}" ]]; then
            size="$(wc -c <"${SERVER_LOG}")"
            ((size >= offset)) || offset=0 # log rolled over meanwhile
            # grep -c reads to the end: `grep -q` quits at the first match, and tail, with more of a
            # long log to write (a data dir of many topics logs every partition it loads), then dies
            # of SIGPIPE, which pipefail turns into "not started" until the start-up timeout.
            if tail -c "+$((offset + 1))" "${SERVER_LOG}" | grep -c 'Kafka Server started' >/dev/null &&
                port_open "${PORT}"; then
                return 0
            fi
        fi
        if ((SECONDS - t0 >= START_TIMEOUT)); then
            print_tail
            die "broker (pid ${pid}) not ready after ${START_TIMEOUT}s; it is left running, see 'kafka.sh logs' / 'kafka.sh down'"
        fi
        sleep 0.5
    done
}

with_lock() {
    mkdir -p "${RUN_DIR}"
    if command -v flock >/dev/null 2>&1; then
        exec 9>"${RUN_DIR}/lock"
        flock -w 300 9 || die "timed out waiting for ${RUN_DIR}/lock"
    fi
}

cmd_up() {
    local t0=${SECONDS} pid offset heap logopts
    with_lock
    pid="$(read_pid)"
    if is_our_broker "${pid}"; then
        if port_open "${PORT}"; then
            log "already running on ${HOST}:${PORT} (pid ${pid})"
            return 0
        fi
        log "pid ${pid} is alive but ${HOST}:${PORT} does not answer yet; waiting"
        wait_ready "${pid}" 0 "${t0}"
        log "ready on ${HOST}:${PORT} (pid ${pid}, $((SECONDS - t0))s)"
        return 0
    fi
    rm -f "${PID_FILE}"

    local p
    for p in "${PORT}" "${CONTROLLER_PORT}"; do
        if port_open "${p}"; then
            die "port ${HOST}:${p} is already in use by another process (not this stack's broker).
$(port_owner "${p}")
       Stop it, or pick other ports: SICKBAY_KAFKA_PORT / SICKBAY_KAFKA_CONTROLLER_PORT."
        fi
    done

    ensure_tools
    ensure_jars
    mkdir -p "${DATA_DIR}" "${LOG_DIR}" "${RUN_DIR}"
    render_config
    format_storage

    read -r -a heap <<<"${HEAP}"
    mapfile -t logopts < <(java_log_opts)
    offset=0
    if [[ -f "${SERVER_LOG}" ]]; then
        offset="$(wc -c <"${SERVER_LOG}")"
    fi
    [[ -f "${CONSOLE_LOG}" ]] && mv -f "${CONSOLE_LOG}" "${CONSOLE_LOG}.prev"
    t0=${SECONDS}
    # setsid: own session, so Ctrl-C in the caller's terminal does not reach it.
    # The child is not a process-group leader, so setsid execs (same PID).
    # 9>&-: the broker must not inherit the flock fd, or it holds the lock.
    nohup setsid "${JAVA}" "${heap[@]}" \
        -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError \
        -Djava.awt.headless=true "${logopts[@]}" \
        -cp "${LIBS_DIR}/*" kafka.Kafka "${CONFIG_FILE}" \
        >"${CONSOLE_LOG}" 2>&1 </dev/null 9>&- &
    pid=$!
    echo "${pid}" >"${PID_FILE}"
    log "starting Kafka ${KAFKA_VERSION} (pid ${pid}), waiting up to ${START_TIMEOUT}s"
    wait_ready "${pid}" "${offset}" "${t0}"
    log "ready on ${HOST}:${PORT} (pid ${pid}, $((SECONDS - t0))s)"
    echo "bootstrap.servers=${HOST}:${PORT}"
}

cmd_down() {
    local purge=0 pid i
    case "${1:-}" in
    "") ;;
    --purge) purge=1 ;;
    *) die "unknown option for down: $1" ;;
    esac
    with_lock
    pid="$(read_pid)"
    if is_our_broker "${pid}"; then
        log "stopping pid ${pid}"
        kill -TERM "${pid}" 2>/dev/null || true
        for ((i = 0; i < STOP_TIMEOUT * 4; i++)); do
            kill -0 "${pid}" 2>/dev/null || break
            sleep 0.25
        done
        if kill -0 "${pid}" 2>/dev/null; then
            log "still alive after ${STOP_TIMEOUT}s; sending SIGKILL"
            kill -KILL "${pid}" 2>/dev/null || true
            for ((i = 0; i < 20; i++)); do
                kill -0 "${pid}" 2>/dev/null || break
                sleep 0.25
            done
        fi
        log "stopped"
    else
        log "not running"
    fi
    rm -f "${PID_FILE}"
    if ((purge)); then
        rm -rf "${DATA_DIR}"
        log "purged ${DATA_DIR}"
    fi
}

cmd_status() {
    local pid
    pid="$(read_pid)"
    if is_our_broker "${pid}"; then
        if port_open "${PORT}"; then
            log "running (pid ${pid}) on ${HOST}:${PORT}"
            return 0
        fi
        log "process ${pid} alive but ${HOST}:${PORT} not answering (starting or hung)"
        return 1
    fi
    log "stopped (${HOST}:${PORT})"
    return 3
}

cmd_logs() {
    local follow=() lines=100 a
    for a in "$@"; do
        case "${a}" in
        -f | --follow) follow=(-F) ;;
        *[!0-9]* | "") die "usage: kafka.sh logs [-f] [LINES]" ;;
        *) lines="${a}" ;;
        esac
    done
    [[ -f "${SERVER_LOG}" ]] || die "no log yet at ${SERVER_LOG}"
    tail -n "${lines}" "${follow[@]}" "${SERVER_LOG}"
}

main() {
    local cmd="${1:-}"
    [[ $# -gt 0 ]] && shift
    case "${cmd}" in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status "$@" ;;
    logs) cmd_logs "$@" ;;
    -h | --help | help) usage ;;
    *)
        usage >&2
        exit 2
        ;;
    esac
}

main "$@"
