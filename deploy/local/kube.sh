#!/usr/bin/env bash
# Local Kubernetes control plane for sickbay tests, envtest style: a REAL etcd and a REAL kube-apiserver,
# with no kubelet, scheduler or controller-manager. Nodes are created by hand; cordon, taints, labels,
# custom resources, watches and Events behave as on a real cluster. No Docker, no kind.
#
# Usage: deploy/local/kube.sh up | down [--purge] | status | env | build | logs [etcd]
#
#   up       build kube-apiserver once (cached), install etcd, make certs/keys/kubeconfig once, start etcd and
#            kube-apiserver in the background, wait for /readyz, apply deploy/local/crds/. Idempotent.
#   down     SIGTERM both (SIGKILL after 20 s), remove pid files. --purge also deletes etcd data and certs.
#   status   exit 0 = both running and /readyz answers, 3 = stopped, 1 = half up / not ready.
#   env      print `export SICKBAY_KUBECONFIG=...` lines (eval "$(deploy/local/kube.sh env)").
#   build    only build (or find) the cached kube-apiserver binary; prints its path.
#   logs     tail of the apiserver log (or etcd's with `logs etcd`).
#
# Why build from source: no Debian/PyPI/npm package ships kube-apiserver, and only the Go module proxy is
# reachable here. k8s.io/kubernetes pins its staging modules at v0.0.0 behind ./staging replaces, which do not
# apply to a dependent module, so the wrapper module below pins each of them to v0.<minor>.<patch> (the list is
# read from that release's own go.mod, so it follows the release).
#
# Settings (environment):
#   SICKBAY_STACK_DIR          <repo>/.cache/stack  (kube/{etcd,logs,run} under it)
#   SICKBAY_KUBE_DIR           <repo>/.cache/kube   (certs, keys, token file, kubeconfig)
#   SICKBAY_DOWNLOAD_CACHE     ${XDG_CACHE_HOME:-$HOME/.cache}/sickbay  (kube/<version>/kube-apiserver, go/{mod,build})
#   SICKBAY_KUBE_VERSION       1.36.3
#   SICKBAY_KUBE_PORT          16443  (apiserver https, 127.0.0.1 only)
#   SICKBAY_ETCD_PORT          12379  (client), SICKBAY_ETCD_PEER_PORT 12380
#   SICKBAY_KUBE_START_TIMEOUT 120
#   SICKBAY_GO                 go binary (default: /usr/local/go/bin/go if present, else `go`)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "${SCRIPT_DIR}/../.." && pwd)"
CRD_DIR="${SCRIPT_DIR}/crds"

STACK_DIR="${SICKBAY_STACK_DIR:-${REPO_DIR}/.cache/stack}"
KUBE_DIR="${SICKBAY_KUBE_DIR:-${REPO_DIR}/.cache/kube}"
DOWNLOAD_CACHE="${SICKBAY_DOWNLOAD_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/sickbay}"
KUBE_VERSION="${SICKBAY_KUBE_VERSION:-1.36.3}"
KUBE_VERSION="${KUBE_VERSION#v}"
PORT="${SICKBAY_KUBE_PORT:-16443}"
ETCD_PORT="${SICKBAY_ETCD_PORT:-12379}"
ETCD_PEER_PORT="${SICKBAY_ETCD_PEER_PORT:-12380}"
START_TIMEOUT="${SICKBAY_KUBE_START_TIMEOUT:-120}"
STOP_TIMEOUT=20
HOST=127.0.0.1

HOME_DIR="${STACK_DIR}/kube"
ETCD_DATA="${HOME_DIR}/etcd"
LOG_DIR="${HOME_DIR}/logs"
RUN_DIR="${HOME_DIR}/run"
ETCD_PID="${RUN_DIR}/etcd.pid"
API_PID="${RUN_DIR}/kube-apiserver.pid"
ETCD_LOG="${LOG_DIR}/etcd.log"
API_LOG="${LOG_DIR}/kube-apiserver.log"

BIN_DIR="${DOWNLOAD_CACHE}/kube/v${KUBE_VERSION}"
API_BIN="${BIN_DIR}/kube-apiserver"
GO_MODCACHE="${DOWNLOAD_CACHE}/go/mod"
GO_BUILDCACHE="${DOWNLOAD_CACHE}/go/build"
KUBECONFIG_FILE="${KUBE_DIR}/kubeconfig"

log() { printf 'kube: %s\n' "$*"; }
die() {
    printf 'kube: ERROR: %s\n' "$*" >&2
    exit 1
}
usage() { sed -n '6,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

as_root() {
    if [[ ${EUID} -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

go_bin() {
    if [[ -n "${SICKBAY_GO:-}" ]]; then
        printf '%s\n' "${SICKBAY_GO}"
    elif [[ -x /usr/local/go/bin/go ]]; then
        printf '%s\n' /usr/local/go/bin/go
    else
        command -v go || die "no Go toolchain (need Go >= the one k8s.io/kubernetes v${KUBE_VERSION} names in go.mod)"
    fi
}

# Build kube-apiserver once per version. The module cache and build cache live under the download cache so a
# rebuild (or CI on the same machine) reuses them; the binary is written to a temp name and renamed last, so an
# interrupted build is never mistaken for a finished one.
ensure_apiserver() {
    if [[ -x "${API_BIN}" ]]; then
        return
    fi
    local go work t0 modfile staging
    go="$(go_bin)"
    mkdir -p "${BIN_DIR}" "${GO_MODCACHE}" "${GO_BUILDCACHE}"
    work="${BIN_DIR}/build"
    mkdir -p "${work}"
    export GOMODCACHE="${GO_MODCACHE}" GOCACHE="${GO_BUILDCACHE}" GOFLAGS=-mod=mod
    t0=${SECONDS}
    log "building kube-apiserver v${KUBE_VERSION} from Go modules into ${API_BIN} (once; long on 2 cores)"
    (
        cd "${work}"
        printf 'module sickbay.local/kube-apiserver-build\n\ngo 1.26\n' >go.mod
        modfile="$("${go}" mod download -json "k8s.io/kubernetes@v${KUBE_VERSION}" |
            sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
        [[ -f "${modfile}" ]] || die "could not download k8s.io/kubernetes@v${KUBE_VERSION}"
        staging="$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "${modfile}")"
        [[ -n "${staging}" ]] || die "no staging replace lines in ${modfile}"
        {
            printf 'module sickbay.local/kube-apiserver-build\n\n'
            grep -m1 '^go ' "${modfile}"
            printf '\nrequire k8s.io/kubernetes v%s\n\ntool k8s.io/kubernetes/cmd/kube-apiserver\n\nreplace (\n' \
                "${KUBE_VERSION}"
            local m
            for m in ${staging}; do
                printf '\t%s => %s v0.%s\n' "${m}" "${m}" "${KUBE_VERSION#*.}"
            done
            printf ')\n'
        } >go.mod
        "${go}" mod tidy >tidy.log 2>&1 || {
            cat tidy.log >&2
            exit 1
        }
        local ld="-s -w -X k8s.io/component-base/version.gitVersion=v${KUBE_VERSION}"
        ld+=" -X k8s.io/component-base/version.gitMajor=${KUBE_VERSION%%.*}"
        ld+=" -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"${KUBE_VERSION}")"
        ld+=" -X k8s.io/component-base/version.gitTreeState=clean"
        "${go}" build -trimpath -ldflags "${ld}" -o "${API_BIN}.tmp" k8s.io/kubernetes/cmd/kube-apiserver
    ) || die "kube-apiserver build failed (see above)"
    mv "${API_BIN}.tmp" "${API_BIN}"
    printf 'version=v%s\nbuilt=%s\nseconds=%s\n' "${KUBE_VERSION}" "$(date -u +%FT%TZ)" "$((SECONDS - t0))" \
        >"${BIN_DIR}/build-info"
    log "built kube-apiserver v${KUBE_VERSION} in $((SECONDS - t0))s"
}

ensure_etcd() {
    if command -v etcd >/dev/null 2>&1; then
        return
    fi
    command -v apt-get >/dev/null 2>&1 || die "etcd not found; install etcd (3.4+) yourself"
    log "installing etcd-server with apt-get"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends etcd-server etcd-client
    # Debian starts a system etcd on 2379; ours uses other ports, but do not leave a stray service behind.
    if command -v systemctl >/dev/null 2>&1; then
        as_root systemctl disable --now etcd >/dev/null 2>&1 || true
    fi
}

# CA, serving cert, admin client cert (system:masters), service-account key pair, and a kubeconfig.
# Generated once; --purge removes them. The key files are 0600 and never printed.
ensure_certs() {
    command -v openssl >/dev/null 2>&1 || die "openssl not found"
    mkdir -p "${KUBE_DIR}"
    chmod 700 "${KUBE_DIR}"
    local d="${KUBE_DIR}"
    if [[ ! -f "${d}/ca.crt" ]]; then
        log "generating CA, certificates and service-account keys in ${d}"
        (
            umask 077
            cd "${d}"
            openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=sickbay-local-ca" \
                -keyout ca.key -out ca.crt 2>/dev/null
            printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,IP:10.0.0.1\n' >san.ext
            openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout apiserver.key -out apiserver.csr 2>/dev/null
            openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
                -extfile san.ext -out apiserver.crt 2>/dev/null
            openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=sickbay-admin" \
                -keyout admin.key -out admin.csr 2>/dev/null
            printf 'extendedKeyUsage=clientAuth\n' >client.ext
            openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
                -extfile client.ext -out admin.crt 2>/dev/null
            openssl genrsa -out sa.key 2048 2>/dev/null
            openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
            rm -f ./*.csr ./*.ext
        )
    fi
    local server="https://${HOST}:${PORT}"
    (
        umask 077
        cat >"${KUBECONFIG_FILE}.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sickbay-local
  cluster:
    server: ${server}
    certificate-authority-data: $(base64 -w0 <"${d}/ca.crt")
users:
- name: sickbay-admin
  user:
    client-certificate-data: $(base64 -w0 <"${d}/admin.crt")
    client-key-data: $(base64 -w0 <"${d}/admin.key")
contexts:
- name: sickbay-local
  context:
    cluster: sickbay-local
    user: sickbay-admin
    namespace: default
current-context: sickbay-local
EOF
        mv "${KUBECONFIG_FILE}.tmp" "${KUBECONFIG_FILE}"
    )
}

port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/${HOST}/$1" 2>/dev/null; }

read_pid() {
    if [[ -f "$1" ]]; then tr -dc '0-9' <"$1" || true; fi
}

# $1 pid, $2 a string our command line must contain (guards against PID reuse).
is_ours() {
    local pid="$1"
    [[ -n "${pid}" ]] || return 1
    kill -0 "${pid}" 2>/dev/null || return 1
    [[ -r "/proc/${pid}/cmdline" ]] || return 0
    tr '\0' ' ' <"/proc/${pid}/cmdline" | grep -qF -- "$2"
}

api_ready() {
    curl -fsS --max-time 3 --cacert "${KUBE_DIR}/ca.crt" --cert "${KUBE_DIR}/admin.crt" \
        --key "${KUBE_DIR}/admin.key" "https://${HOST}:${PORT}/readyz" >/dev/null 2>&1
}

etcd_ready() {
    curl -fsS --max-time 3 "http://${HOST}:${ETCD_PORT}/health" 2>/dev/null | grep -q '"health":"true"'
}

print_tail() {
    local f
    for f in "$@"; do
        if [[ -s "${f}" ]]; then
            printf -- '----- last 30 lines of %s -----\n' "${f}" >&2
            tail -n 30 "${f}" >&2
        fi
    done
}

wait_for() { # $1 pid, $2 readiness function, $3 what, $4 log file
    local t0=${SECONDS}
    until "$2"; do
        if ! kill -0 "$1" 2>/dev/null; then
            print_tail "$4"
            die "$3 (pid $1) exited during start-up"
        fi
        if ((SECONDS - t0 >= START_TIMEOUT)); then
            print_tail "$4"
            die "$3 (pid $1) not ready after ${START_TIMEOUT}s; left running, see 'kube.sh logs' / 'kube.sh down'"
        fi
        sleep 0.5
    done
}

start_etcd() {
    local pid
    pid="$(read_pid "${ETCD_PID}")"
    if is_ours "${pid}" "--data-dir ${ETCD_DATA}"; then
        wait_for "${pid}" etcd_ready etcd "${ETCD_LOG}"
        return
    fi
    local p
    for p in "${ETCD_PORT}" "${ETCD_PEER_PORT}"; do
        port_open "${p}" && die "port ${HOST}:${p} is in use by another process; set SICKBAY_ETCD_PORT / SICKBAY_ETCD_PEER_PORT"
    done
    mkdir -p "${ETCD_DATA}"
    chmod 700 "${ETCD_DATA}"
    nohup setsid etcd --name sickbay --data-dir "${ETCD_DATA}" \
        --listen-client-urls "http://${HOST}:${ETCD_PORT}" --advertise-client-urls "http://${HOST}:${ETCD_PORT}" \
        --listen-peer-urls "http://${HOST}:${ETCD_PEER_PORT}" \
        --initial-advertise-peer-urls "http://${HOST}:${ETCD_PEER_PORT}" \
        --initial-cluster "sickbay=http://${HOST}:${ETCD_PEER_PORT}" \
        --quota-backend-bytes 2147483648 --snapshot-count 10000 \
        >>"${ETCD_LOG}" 2>&1 </dev/null 9>&- &
    pid=$!
    echo "${pid}" >"${ETCD_PID}"
    log "starting etcd (pid ${pid}) on ${HOST}:${ETCD_PORT}"
    wait_for "${pid}" etcd_ready etcd "${ETCD_LOG}"
}

start_apiserver() {
    local pid d="${KUBE_DIR}"
    pid="$(read_pid "${API_PID}")"
    if is_ours "${pid}" "--secure-port=${PORT}"; then
        wait_for "${pid}" api_ready kube-apiserver "${API_LOG}"
        return
    fi
    port_open "${PORT}" && die "port ${HOST}:${PORT} is in use by another process; set SICKBAY_KUBE_PORT"
    [[ -f "${API_LOG}" ]] && mv -f "${API_LOG}" "${API_LOG}.prev"
    # --watch-cache=false: with Debian's etcd 3.4.23 (no reliable progress notifications) the watch cache
    # never catches up with a consistent list's revision and every watch answers "Too large resource
    # version"; without the cache, reads and watches go straight to etcd, which is all a test needs.
    # --authorization-mode=RBAC: the admin client cert is in system:masters, so tests run as cluster-admin while
    # RBAC stays as on a real cluster. No admission plugins that need controllers (ServiceAccount token
    # minting would wait for the token controller); service-account keys are still given because the
    # apiserver requires an issuer and a signing key to start.
    nohup setsid "${API_BIN}" \
        --etcd-servers="http://${HOST}:${ETCD_PORT}" \
        --bind-address="${HOST}" --advertise-address="${HOST}" --secure-port="${PORT}" \
        --cert-dir="${d}" --tls-cert-file="${d}/apiserver.crt" --tls-private-key-file="${d}/apiserver.key" \
        --client-ca-file="${d}/ca.crt" \
        --service-account-issuer=https://localhost --service-account-key-file="${d}/sa.pub" \
        --service-account-signing-key-file="${d}/sa.key" \
        --service-cluster-ip-range=10.0.0.0/24 \
        --authorization-mode=RBAC \
        --disable-admission-plugins=ServiceAccount \
        --allow-privileged=true \
        --endpoint-reconciler-type=none \
        --watch-cache=false \
        --v=1 \
        >>"${API_LOG}" 2>&1 </dev/null 9>&- &
    pid=$!
    echo "${pid}" >"${API_PID}"
    log "starting kube-apiserver v${KUBE_VERSION} (pid ${pid}) on https://${HOST}:${PORT}"
    wait_for "${pid}" api_ready kube-apiserver "${API_LOG}"
}

# Apply the CRDs with plain HTTPS calls (no kubectl on this machine; the apiserver reads YAML bodies): create when absent, then
# wait for the Established condition so tests never race the discovery refresh.
apply_crds() {
    local f name code base="https://${HOST}:${PORT}/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    local c=(curl -sS --max-time 10 --cacert "${KUBE_DIR}/ca.crt" --cert "${KUBE_DIR}/admin.crt" --key "${KUBE_DIR}/admin.key")
    for f in "${CRD_DIR}"/*.yaml; do
        # metadata.name is the first two-space-indented `name:` (the CRD files keep that layout).
        name="$(sed -n 's/^  name: \([a-z0-9.-]*\)$/\1/p' "${f}" | head -n1)"
        [[ -n "${name}" ]] || die "no metadata.name in ${f}"
        code="$("${c[@]}" -o /dev/null -w '%{http_code}' "${base}/${name}")"
        if [[ "${code}" == 404 ]]; then
            code="$("${c[@]}" -o "${RUN_DIR}/crd.out" -w '%{http_code}' -X POST -H 'Content-Type: application/yaml' \
                --data-binary "@${f}" "${base}")"
            [[ "${code}" == 201 ]] || die "creating CRD ${name} failed (HTTP ${code}): $(head -c 600 "${RUN_DIR}/crd.out")"
            log "installed CRD ${name}"
        fi
        local t0=${SECONDS}
        until "${c[@]}" "${base}/${name}" | tr -d ' \n' | grep -q '"type":"Established","status":"True"'; do
            ((SECONDS - t0 < 30)) || die "CRD ${name} not Established after 30s"
            sleep 0.3
        done
    done
}

with_lock() {
    mkdir -p "${RUN_DIR}" "${LOG_DIR}"
    if command -v flock >/dev/null 2>&1; then
        exec 9>"${RUN_DIR}/lock"
        # The first build can take most of an hour on 2 cores; a second caller waits for it.
        flock -w 5400 9 || die "timed out waiting for ${RUN_DIR}/lock"
    fi
}

cmd_up() {
    local t0=${SECONDS}
    with_lock
    if api_ready 2>/dev/null && is_ours "$(read_pid "${API_PID}")" "--secure-port=${PORT}"; then
        apply_crds
        log "already running on https://${HOST}:${PORT}"
        cmd_env
        return 0
    fi
    ensure_etcd
    ensure_apiserver
    ensure_certs
    start_etcd
    start_apiserver
    apply_crds
    log "ready on https://${HOST}:${PORT} ($((SECONDS - t0))s)"
    cmd_env
}

stop_pid() { # $1 pid file, $2 cmdline marker, $3 name
    local pid i
    pid="$(read_pid "$1")"
    if is_ours "${pid}" "$2"; then
        log "stopping $3 (pid ${pid})"
        kill -TERM "${pid}" 2>/dev/null || true
        for ((i = 0; i < STOP_TIMEOUT * 4; i++)); do
            kill -0 "${pid}" 2>/dev/null || break
            sleep 0.25
        done
        if kill -0 "${pid}" 2>/dev/null; then
            log "$3 still alive after ${STOP_TIMEOUT}s; SIGKILL"
            kill -KILL "${pid}" 2>/dev/null || true
        fi
    else
        log "$3 not running"
    fi
    rm -f "$1"
}

cmd_down() {
    local purge=0
    case "${1:-}" in
    "") ;;
    --purge) purge=1 ;;
    *) die "unknown option for down: $1" ;;
    esac
    with_lock
    stop_pid "${API_PID}" "--secure-port=${PORT}" kube-apiserver
    stop_pid "${ETCD_PID}" "--data-dir ${ETCD_DATA}" etcd
    if ((purge)); then
        rm -rf "${ETCD_DATA}" "${KUBE_DIR}"
        log "purged ${ETCD_DATA} and ${KUBE_DIR}"
    fi
}

cmd_status() {
    local e a
    e="$(read_pid "${ETCD_PID}")"
    a="$(read_pid "${API_PID}")"
    if is_ours "${a}" "--secure-port=${PORT}" && api_ready; then
        log "running: kube-apiserver pid ${a} on https://${HOST}:${PORT}, etcd pid ${e:-?} on ${HOST}:${ETCD_PORT}"
        return 0
    fi
    if is_ours "${e}" "--data-dir ${ETCD_DATA}" || is_ours "${a}" "--secure-port=${PORT}"; then
        log "partly up (etcd pid ${e:-none}, apiserver pid ${a:-none}) or not ready"
        return 1
    fi
    log "stopped"
    return 3
}

cmd_env() {
    printf 'export SICKBAY_KUBECONFIG=%q\n' "${KUBECONFIG_FILE}"
}

cmd_logs() {
    local f="${API_LOG}"
    [[ "${1:-}" == etcd ]] && f="${ETCD_LOG}"
    [[ -f "${f}" ]] || die "no log yet at ${f}"
    tail -n 100 "${f}"
}

main() {
    local cmd="${1:-}"
    [[ $# -gt 0 ]] && shift
    case "${cmd}" in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status "$@" ;;
    env) cmd_env ;;
    build)
        with_lock
        ensure_apiserver
        printf '%s\n' "${API_BIN}"
        ;;
    logs) cmd_logs "$@" ;;
    -h | --help | help) usage ;;
    *)
        usage >&2
        exit 2
        ;;
    esac
}

main "$@"
