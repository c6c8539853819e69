#!/usr/bin/env bash
# Deploy tooling that Debian does not package (helm), built once from its Go
# module and cached, so tests and `make` targets find it without a network
# after the first run. No prebuilt binaries are downloaded: the Go module proxy
# serves helm's source and `go install` builds it here.
#
# Usage: deploy/local/tools.sh helm     print the path of a working helm (build it once)
#        deploy/local/tools.sh status   show what is cached
#
# Settings (environment):
#   SICKBAY_TOOLS_DIR     ${XDG_CACHE_HOME:-$HOME/.cache}/sickbay/bin
#   SICKBAY_HELM_VERSION  v3.19.0 (a version the Go module proxy serves)
#   GO                    go from PATH, else /usr/local/go/bin/go
set -euo pipefail

TOOLS_DIR="${SICKBAY_TOOLS_DIR:-${XDG_CACHE_HOME:-${HOME}/.cache}/sickbay/bin}"
HELM_VERSION="${SICKBAY_HELM_VERSION:-v3.19.0}"
HELM_BIN="${TOOLS_DIR}/helm-${HELM_VERSION}"

log() { printf 'tools: %s\n' "$*" >&2; }
die() {
    printf 'tools: ERROR: %s\n' "$*" >&2
    exit 1
}

go_bin() {
    if [[ -n "${GO:-}" ]]; then
        printf '%s\n' "${GO}"
    elif command -v go >/dev/null 2>&1; then
        command -v go
    elif [[ -x /usr/local/go/bin/go ]]; then
        printf '%s\n' /usr/local/go/bin/go
    else
        die "no Go toolchain (set GO=/path/to/go, or install golang-go); helm is built from helm.sh/helm/v3"
    fi
}

ensure_helm() {
    if [[ -x "${HELM_BIN}" ]] && "${HELM_BIN}" version --short >/dev/null 2>&1; then
        printf '%s\n' "${HELM_BIN}"
        return
    fi
    mkdir -p "${TOOLS_DIR}"
    exec 9>"${TOOLS_DIR}/.helm.lock"
    flock -w 1200 9 || die "timed out waiting for ${TOOLS_DIR}/.helm.lock"
    if [[ ! -x "${HELM_BIN}" ]]; then
        local gobin work t0=${SECONDS}
        gobin="$(go_bin)"
        work="$(mktemp -d "${TOOLS_DIR}/.build.XXXXXX")"
        # shellcheck disable=SC2064  # expand now
        trap "rm -rf '${work}'" EXIT
        log "building helm ${HELM_VERSION} with $("${gobin}" version) (once; a few minutes on 2 cores)"
        # CGO off: a static binary that does not depend on this host's libc.
        if ! CGO_ENABLED=0 GOBIN="${work}" GOFLAGS="-trimpath" \
            "${gobin}" install "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" >"${work}/build.log" 2>&1; then
            cat "${work}/build.log" >&2
            die "go install helm.sh/helm/v3/cmd/helm@${HELM_VERSION} failed (Go module proxy reachable?)"
        fi
        mv "${work}/helm" "${HELM_BIN}"
        rm -rf "${work}"
        trap - EXIT
        log "helm ready at ${HELM_BIN} ($((SECONDS - t0))s)"
    fi
    ln -sfn "$(basename "${HELM_BIN}")" "${TOOLS_DIR}/helm"
    printf '%s\n' "${HELM_BIN}"
}

case "${1:-}" in
helm) ensure_helm ;;
status)
    ls -l "${TOOLS_DIR}" 2>/dev/null || log "nothing cached in ${TOOLS_DIR}"
    ;;
*)
    sed -n '7,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
