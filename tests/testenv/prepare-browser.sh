#!/usr/bin/env bash
# Install (once) headless Chromium from Debian's packages, for the HTML report test
# (tests/observe/test_metrics_html.py). `make testenv` calls this; apt caches the .debs, so a warm run
# only checks that the binary exists. Needs root (CI runs as root); without root it says what to run.
#
#   bash tests/testenv/prepare-browser.sh
set -euo pipefail

log() { printf '[testenv] %s\n' "$*" >&2; }

if command -v chromium >/dev/null 2>&1; then
  log "chromium: $(chromium --version 2>/dev/null || echo present)"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  log "chromium is missing: run 'sudo apt-get install -y --no-install-recommends chromium' (or make testenv as root)"
  exit 0
fi
started=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
# apt-get update only when the package lists do not know chromium yet
apt-cache show chromium >/dev/null 2>&1 || apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
log "chromium installed in $(( $(date +%s) - started ))s: $(chromium --version)"
