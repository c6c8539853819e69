#!/usr/bin/env bash
# Debian tools the test suite calls that a fresh machine may lack: shellcheck (deploy scripts) and
# systemd-analyze (unit files). Installed once with apt-get when missing; a no-op afterwards.
set -euo pipefail

missing=()
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
[[ ${#missing[@]} -eq 0 ]] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "test-tools: missing ${missing[*]}; install them yourself (no apt-get here)" >&2
    exit 1
fi
as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }
echo "test-tools: installing ${missing[*]} with apt-get" >&2
as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
