#!/usr/bin/env bash
# stop-slurm.sh - stop the daemons started by tests/slurm/start-slurm.sh, by the PIDs in
# $SLURM_CI_DIR (never by name). Order: cancel jobs, slurmd, slurmctld, munged. Idempotent;
# always exits 0 so it can run as a test teardown.
#   SLURM_CI_DIR   (default /tmp/synthdeid-slurm)
#   --purge        also delete $SLURM_CI_DIR (job state, logs, fake GPU devices)
set -uo pipefail
DIR=${SLURM_CI_DIR:-/tmp/synthdeid-slurm}
log() { printf '[stop-slurm %(%T)T] %s\n' -1 "$*"; }

# cancel leftover jobs so no slurmstepd/job processes outlive slurmd (proctrack/linuxproc)
if [[ -s $DIR/slurmctld.pid ]] && kill -0 "$(cat "$DIR/slurmctld.pid")" 2>/dev/null; then
  jobs=$(squeue -h -t PD,R,CG,S -o %i 2>/dev/null | tr '\n' ' ')
  if [[ -n ${jobs// } ]]; then
    log "cancelling jobs: $jobs"
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null
    for _ in $(seq 30); do
      [[ -z $(squeue -h -t PD,R,CG,S -o %i 2>/dev/null) ]] && break; sleep 0.5
    done
  fi
fi

stop_pidfile() {   # $1=name $2=pidfile $3=expected comm
  local f=$2 pid comm
  [[ -s $f ]] || { log "$1: no pidfile"; return; }
  pid=$(cat "$f")
  comm=$(ps -o comm= -p "$pid" 2>/dev/null || true)
  if [[ -z $comm ]]; then log "$1: pid $pid not running"; rm -f "$f"; return; fi
  if [[ $comm != "$3" ]]; then
    log "$1: pid $pid is '$comm', not '$3' - leaving it alone"; rm -f "$f"; return
  fi
  kill -TERM "$pid"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    log "$1: still alive after 10s, SIGKILL"; kill -KILL "$pid"; sleep 0.2
  fi
  rm -f "$f"; log "$1 (pid $pid) stopped"
}
stop_pidfile slurmd    "$DIR/slurmd.pid"    slurmd
stop_pidfile slurmctld "$DIR/slurmctld.pid" slurmctld   # its child slurmscriptd exits with it
stop_pidfile munged    "$DIR/munged.pid"    munged

if [[ ${1:-} == --purge ]]; then rm -rf "$DIR"; log "removed $DIR"; fi
exit 0
