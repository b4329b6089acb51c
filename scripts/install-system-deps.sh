#!/usr/bin/env bash
# Installs the system tools the test suite uses: kcat (librdkafka's CLI client).
# Idempotent; needs root (or sudo) only when something is missing.
set -euo pipefail
if command -v kcat >/dev/null 2>&1; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq kcat >/dev/null
command -v kcat >/dev/null
