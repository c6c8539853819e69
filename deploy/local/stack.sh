#!/usr/bin/env bash
# The whole local stack for demo and tests: real Kafka (KRaft) + real Slurm + a real kube-apiserver/etcd
# (SICKBAY_STACK_KUBE=0 leaves Kubernetes out), then sickbay's topics.
# Usage: stack.sh up|down|status   (settings: see kafka.sh and slurm.sh; SICKBAY_PYTHON picks the venv)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PY="${SICKBAY_PYTHON:-$REPO/.venv/bin/python}"
export SICKBAY_KAFKA_BOOTSTRAP="${SICKBAY_KAFKA_BOOTSTRAP:-127.0.0.1:${SICKBAY_KAFKA_PORT:-39092}}"

case "${1:-}" in
  up)
    bash "$HERE/kafka.sh" up
    bash "$HERE/slurm.sh" up
    [[ "${SICKBAY_STACK_KUBE:-1}" == 0 ]] || bash "$HERE/kube.sh" up
    "$PY" -m streams.cli.main topics create
    ;;
  down)
    shift || true
    bash "$HERE/kube.sh" down "$@" || true
    bash "$HERE/slurm.sh" down "$@" || true
    bash "$HERE/kafka.sh" down "$@" || true
    ;;
  status)
    rc=0
    bash "$HERE/kafka.sh" status || rc=$?
    bash "$HERE/slurm.sh" status || rc=$?
    [[ "${SICKBAY_STACK_KUBE:-1}" == 0 ]] || bash "$HERE/kube.sh" status || rc=$?
    exit "$rc"
    ;;
  *)
    echo "usage: $0 up|down|status" >&2
    exit 2
    ;;
esac
