#!/usr/bin/env bash
# Install sickbay's systemd units on a Slurm control host (or any Linux host).
#
# Usage: deploy/systemd/install.sh [options]
#
#   --prefix DIR      install root (default /). Units, the environment file and the
#                     state directory go under it and the units point into it, so a
#                     test can install into a temp dir without systemd as PID 1.
#   --sickbay PATH    the sickbay executable (default: `command -v sickbay`, else
#                     /opt/sickbay/bin/sickbay).
#   --user NAME       the service user (default sickbay; created as a system user when
#                     missing and the prefix is /).
#   --env KEY=VALUE   a setting for a NEW environment file (repeatable). An existing
#                     environment file is never rewritten: it holds the secrets.
#   --enable LIST     comma-separated units to enable and start with systemctl when
#                     systemd runs this host (e.g. sickbay-worker@1,sickbay-adapter-slurm).
#   --dry-run         print what would be done; change nothing.
#   -h, --help
#
# Files written (under the prefix):
#   etc/systemd/system/sickbay-*.service          the units (rendered from deploy/systemd/units/)
#   etc/sickbay/sickbay.env                        EnvironmentFile: SICKBAY_* settings and secrets, 0600
#   etc/sickbay/collect-{slurm,files}.env          arguments of sickbay-collect@slurm / @files
#   var/lib/sickbay/                               state (RocksDB per worker), owned by the service user
#   usr/share/doc/sickbay/deploy.md                the deployment guide the units link to
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${HERE}/../.." && pwd)"

PREFIX=/
SICKBAY_BIN=""
SVC_USER=sickbay
DRY_RUN=0
ENABLE=""
ENV_KV=()

log() { printf 'install: %s\n' "$*"; }
die() {
    printf 'install: ERROR: %s\n' "$*" >&2
    exit 1
}
usage() { sed -n '4,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while (($#)); do
    case "$1" in
    --prefix) PREFIX="${2:?--prefix needs a directory}"; shift 2 ;;
    --prefix=*) PREFIX="${1#*=}"; shift ;;
    --sickbay) SICKBAY_BIN="${2:?--sickbay needs a path}"; shift 2 ;;
    --sickbay=*) SICKBAY_BIN="${1#*=}"; shift ;;
    --user) SVC_USER="${2:?--user needs a name}"; shift 2 ;;
    --user=*) SVC_USER="${1#*=}"; shift ;;
    --env) ENV_KV+=("${2:?--env needs KEY=VALUE}"); shift 2 ;;
    --env=*) ENV_KV+=("${1#*=}"); shift ;;
    --enable) ENABLE="${2:?--enable needs a list}"; shift 2 ;;
    --enable=*) ENABLE="${1#*=}"; shift ;;
    --dry-run) DRY_RUN=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown option: $1" ;;
    esac
done

[[ "${PREFIX}" == /* ]] || PREFIX="$(pwd)/${PREFIX}"
PREFIX="${PREFIX%/}"
ROOT_INSTALL=0
[[ -z "${PREFIX}" ]] && ROOT_INSTALL=1

UNIT_DIR="${PREFIX}/etc/systemd/system"
CONF_DIR="${PREFIX}/etc/sickbay"
ENV_FILE="${CONF_DIR}/sickbay.env"
STATE_DIR="${PREFIX}/var/lib/sickbay"
DOC_DIR="${PREFIX}/usr/share/doc/sickbay"

if [[ -z "${SICKBAY_BIN}" ]]; then
    SICKBAY_BIN="$(command -v sickbay || echo /opt/sickbay/bin/sickbay)"
fi
[[ "${SICKBAY_BIN}" == /* ]] || die "--sickbay must be an absolute path (systemd needs one), not ${SICKBAY_BIN}"
if [[ ! -x "${SICKBAY_BIN}" ]]; then
    ((DRY_RUN)) || die "${SICKBAY_BIN} is not executable: install sickbay first (python3 -m venv /opt/sickbay && /opt/sickbay/bin/pip install sickbay), or pass --sickbay"
    log "note: ${SICKBAY_BIN} does not exist yet"
fi
for kv in "${ENV_KV[@]+"${ENV_KV[@]}"}"; do
    [[ "${kv}" =~ ^[A-Z_][A-Z0-9_]*=.*$ ]] || die "--env wants KEY=VALUE with an upper-case KEY, not '${kv}'"
    [[ "${kv}" != *$'\n'* ]] || die "--env value may not contain a newline"
done

LOG_GROUP=adm
getent group adm >/dev/null 2>&1 || LOG_GROUP="${SVC_USER}"

run() {
    if ((DRY_RUN)); then
        printf 'would run:'
        printf ' %q' "$@"
        printf '\n'
    else
        "$@"
    fi
}

ensure_user() {
    if id -u "${SVC_USER}" >/dev/null 2>&1; then
        return
    fi
    ((ROOT_INSTALL)) || die "user ${SVC_USER} does not exist (it is created only by an install into /)"
    run useradd --system --home-dir /var/lib/sickbay --no-create-home --shell /usr/sbin/nologin "${SVC_USER}"
}

render_unit() {
    local src="$1" dst="$2" group
    group="$(id -gn "${SVC_USER}" 2>/dev/null || echo "${SVC_USER}")"
    if ((DRY_RUN)); then
        log "would write ${dst}"
        return
    fi
    sed -e "s|@SICKBAY@|${SICKBAY_BIN}|g" \
        -e "s|@USER@|${SVC_USER}|g" \
        -e "s|@GROUP@|${group}|g" \
        -e "s|@LOG_GROUP@|${LOG_GROUP}|g" \
        -e "s|@ENV_FILE@|${ENV_FILE}|g" \
        -e "s|@CONF_DIR@|${CONF_DIR}|g" \
        -e "s|@STATE_DIR@|${STATE_DIR}|g" \
        -e "s|@DOC_DIR@|${DOC_DIR}|g" \
        "${src}" >"${dst}.tmp"
    chmod 0644 "${dst}.tmp"
    mv "${dst}.tmp" "${dst}"
    log "wrote ${dst}"
}

write_env_file() {
    if [[ -e "${ENV_FILE}" ]]; then
        log "keeping ${ENV_FILE} (it holds settings and secrets; edit it by hand)"
        run chmod 0600 "${ENV_FILE}"
        return
    fi
    if ((DRY_RUN)); then
        log "would write ${ENV_FILE} (0600) with ${#ENV_KV[@]} settings"
        return
    fi
    local tmp
    tmp="$(mktemp "${CONF_DIR}/.sickbay.env.XXXXXX")"
    chmod 0600 "${tmp}"
    {
        echo "# sickbay settings and secrets, read by every sickbay-*.service (EnvironmentFile=)."
        echo "# Names: SICKBAY_<setting> (streams/settings.py, README 'Configuration'), CLICKHOUSE_URL, SLURM_CONF."
        echo "# Keep this file 0600: it may hold CLICKHOUSE_URL with a password and SICKBAY_API_TOKEN."
        echo "SICKBAY_MODE=observe"
        local kv
        for kv in "${ENV_KV[@]+"${ENV_KV[@]}"}"; do
            printf '%s\n' "${kv}"
        done
    } >"${tmp}"
    mv "${tmp}" "${ENV_FILE}"
    log "wrote ${ENV_FILE} (0600)"
}

# Arguments of the two collectors a Slurm control host runs (sickbay-collect@<name>).
write_collector_envs() {
    local f
    f="${CONF_DIR}/collect-slurm.env"
    if [[ ! -e "${f}" ]]; then
        if ((DRY_RUN)); then
            log "would write ${f}"
        else
            cat >"${f}" <<EOT
# Arguments of sickbay-collect@slurm: slurmctld.log plus squeue/sinfo/sacct polls give the job -> node topology.
SICKBAY_COLLECT_ARGS=--log /var/log/slurm/slurmctld.log --host $(hostname)
EOT
            chmod 0644 "${f}"
            log "wrote ${f}"
        fi
    fi
    f="${CONF_DIR}/collect-files.env"
    if [[ ! -e "${f}" ]]; then
        if ((DRY_RUN)); then
            log "would write ${f}"
        else
            cat >"${f}" <<EOT
# Arguments of sickbay-collect@files: files and globs followed through rotation.
SICKBAY_COLLECT_ARGS=--follow --from-end --host $(hostname) /var/log/kern.log
EOT
            chmod 0644 "${f}"
            log "wrote ${f}"
        fi
    fi
}

main() {
    ((DRY_RUN)) && log "dry run: nothing is changed"
    log "prefix ${PREFIX:-/}, sickbay ${SICKBAY_BIN}, user ${SVC_USER}"
    ensure_user
    run install -d -m 0755 "${UNIT_DIR}" "${DOC_DIR}"
    run install -d -m 0750 "${CONF_DIR}"
    run install -d -m 0750 "${STATE_DIR}"
    if ! ((DRY_RUN)) && [[ "$(id -u)" -eq 0 ]]; then
        chown "${SVC_USER}:" "${STATE_DIR}"
    fi
    local src
    for src in "${HERE}"/units/*.service; do
        render_unit "${src}" "${UNIT_DIR}/$(basename "${src}")"
    done
    write_env_file
    write_collector_envs
    if [[ -f "${REPO}/docs/deploy.md" ]]; then
        run install -m 0644 "${REPO}/docs/deploy.md" "${DOC_DIR}/deploy.md"
    fi

    if ((ROOT_INSTALL)) && [[ -d /run/systemd/system ]]; then
        run systemctl daemon-reload
        if [[ -n "${ENABLE}" ]]; then
            local unit
            IFS=, read -r -a units <<<"${ENABLE}"
            for unit in "${units[@]}"; do
                run systemctl enable --now "${unit}"
            done
        fi
    else
        log "systemd is not running this host (or the prefix is not /): units installed, not enabled"
        [[ -z "${ENABLE}" ]] || log "enable later: systemctl enable --now ${ENABLE//,/ }"
    fi
    log "next: edit ${ENV_FILE} (SICKBAY_KAFKA_BOOTSTRAP, SICKBAY_CLUSTER, CLICKHOUSE_URL, SLURM_CONF), then"
    log "      systemctl enable --now sickbay-worker@1 sickbay-adapter-slurm sickbay-collect@slurm"
}

main
