#!/usr/bin/env bash
# Stops the one-node cluster of start.sh (slurmctld, slurmd, munged).
scontrol shutdown 2>/dev/null
for _ in $(seq 1 40); do pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null || break; sleep 0.25; done
if [ -f /run/munge/munged.pid ]; then
  p=$(cat /run/munge/munged.pid); kill "$p" 2>/dev/null
  for _ in $(seq 1 40); do kill -0 "$p" 2>/dev/null || break; sleep 0.25; done
fi
true
