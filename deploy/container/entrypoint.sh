#!/bin/sh
# One entry point for every sickbay role in the image.
#
#   sickbay-entrypoint worker | collect file ... | adapter slurm | adapter kubernetes | api | sink clickhouse
#
# With no arguments the role comes from SICKBAY_ROLE (words separated by spaces),
# so a role can be chosen by the environment alone (compose, systemd, Helm).
#
# A StatefulSet pod is named <set>-<ordinal>; when SICKBAY_INSTANCE_ID is unset
# the pod name (HOSTNAME) is used as the Kafka static-membership id, so a worker
# that restarts within the session timeout gets its partitions back without a
# group-wide rebalance. Faust reads it as CONSUMER_GROUP_INSTANCE_ID.
set -eu

if [ "$#" -eq 0 ] && [ -n "${SICKBAY_ROLE:-}" ]; then
    # shellcheck disable=SC2086  # split the role into words on purpose
    set -- ${SICKBAY_ROLE}
fi

if [ "${1:-}" = "worker" ] && [ -z "${CONSUMER_GROUP_INSTANCE_ID:-}" ]; then
    # HOSTNAME is set by Docker and Kubernetes (the pod name); hostname(1) covers the rest.
    # shellcheck disable=SC3028
    CONSUMER_GROUP_INSTANCE_ID="${SICKBAY_INSTANCE_ID:-${HOSTNAME:-$(hostname 2>/dev/null || true)}}"
    if [ -n "${CONSUMER_GROUP_INSTANCE_ID}" ]; then
        export CONSUMER_GROUP_INSTANCE_ID
    else
        unset CONSUMER_GROUP_INSTANCE_ID
    fi
fi

exec sickbay "$@"
