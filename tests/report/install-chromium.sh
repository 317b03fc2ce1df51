#!/usr/bin/env bash
# install-chromium.sh - make `chromium` and `chromedriver` available for the report test
# (tests/test_workflow.py::test_the_report_renders_every_item_in_chromium), on Debian 12.
#
# Idempotent: when both are already on PATH it only prints their versions. Otherwise it
# installs Debian's chromium + chromium-driver with apt, which needs root; run as another
# user without them, it exits 3 and says what to install.
set -euo pipefail

log() { printf '[install-chromium] %s\n' "$*"; }
have_both() { command -v chromium >/dev/null && command -v chromedriver >/dev/null; }

if ! have_both; then
  if [[ $(id -u) != 0 ]]; then
    log "chromium and chromedriver are not on PATH, and installing them needs root:"
    log "  apt-get install --no-install-recommends chromium chromium-driver"
    exit 3
  fi
  export DEBIAN_FRONTEND=noninteractive
  pkgs=(chromium chromium-driver)
  # the tests may run in parallel (pytest -n): wait for another apt-get's lock, never fail on it
  lock=(-o DPkg::Lock::Timeout=900)
  log "installing: ${pkgs[*]}"
  if ! apt-get install "${lock[@]}" -y -q --no-install-recommends "${pkgs[@]}"; then
    log "install failed; refreshing the package lists and trying again"
    apt-get update "${lock[@]}" -q
    apt-get install "${lock[@]}" -y -q --no-install-recommends "${pkgs[@]}"
  fi
  have_both || {
    log "ERROR: chromium or chromedriver is still not on PATH"
    exit 1
  }
fi

log "$(chromium --version)"
log "$(chromedriver --version)"
