#!/usr/bin/env bash
# install-slurm.sh - apt-install what start-slurm.sh runs (munge, slurmctld, slurmd,
# slurm-client) where they are missing, on Debian 12. start-slurm.sh calls it first; .ci/run
# calls it in the background while the environment builds, so that the SLURM test finds
# the packages there. Idempotent; waits for another apt-get's lock rather than failing.
#
# Env knobs: SLURM_CI_DIR (its apt log goes to $SLURM_CI_DIR/log/apt.log, default
# /tmp/synthdeid-slurm), SLURM_CI_APT_CACHE (an optional apt archive dir).
# Must run as root.
set -euo pipefail

DIR=${SLURM_CI_DIR:-/tmp/synthdeid-slurm}
log() { printf '[install-slurm %(%T)T] %s\n' -1 "$*"; }
die() { log "ERROR: $*"; exit 1; }

[[ $(id -u) == 0 ]] || die "must run as root"
mkdir -p "$DIR/log"

PKGS=(munge slurmctld slurmd slurm-client)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing: ${missing[*]} (log: $DIR/log/apt.log)"
  export DEBIAN_FRONTEND=noninteractive
  # the tests may run in parallel (pytest -n): wait for another apt-get's lock, never fail on it
  aptopts=(-y -q --no-install-recommends -o DPkg::Lock::Timeout=900)
  if [[ -n ${SLURM_CI_APT_CACHE:-} ]]; then
    mkdir -p "$SLURM_CI_APT_CACHE/partial"; aptopts+=(-o "Dir::Cache::archives=$SLURM_CI_APT_CACHE")
  fi
  # no init system here: keep the packages' postinst scripts from trying to start services
  made_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d; made_policy=1
  fi
  ok=1
  apt-get update -q -o DPkg::Lock::Timeout=900 >"$DIR/log/apt.log" 2>&1 \
    && apt-get install "${aptopts[@]}" "${missing[@]}" >>"$DIR/log/apt.log" 2>&1 || ok=0
  if ((made_policy)); then rm -f /usr/sbin/policy-rc.d; fi
  ((ok)) || { tail -30 "$DIR/log/apt.log"; die "apt-get update/install failed"; }
else
  log "packages already installed"
fi
