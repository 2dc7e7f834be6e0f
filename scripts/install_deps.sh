#!/usr/bin/env bash
# Installs the Debian packages kiln needs to build and test, only those missing.
# Idempotent: a second run installs nothing. Uses apt-get as root, sudo otherwise.
# Usage: scripts/install_deps.sh [extra-package ...]
set -euo pipefail

PKGS=(cmake g++ make libopenmpi-dev openmpi-bin libeigen3-dev libspdlog-dev libfmt-dev doctest-dev libstb-dev libxxhash-dev libcli11-dev zlib1g-dev libomp-dev "$@")

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "[kiln] all Debian packages present"
  exit 0
fi
echo "[kiln] installing: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "[kiln] error: missing packages (${missing[*]}) and neither root nor sudo is available." >&2
  echo "[kiln] ask an administrator to run: apt-get install ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
