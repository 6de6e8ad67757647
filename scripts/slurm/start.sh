#!/usr/bin/env bash
# Brings up a one-node Slurm cluster on this machine for the tests (root, no systemd):
# installs slurmctld/slurmd/munge from Debian when missing, then munged, slurmctld,
# slurmd -N localhost. Idempotent: a running cluster is left as it is.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ "$(id -u)" != 0 ]; then echo "slurm: not root; not starting a cluster"; exit 0; fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null || ! ldconfig -p | grep -q "libpmix.so "; then
  echo "slurm: installing slurmctld slurmd slurm-client munge libpmix-dev from Debian"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge libpmix-dev; } \
      > /tmp/hpcopt-slurm-apt.log 2>&1; then
    tail -20 /tmp/hpcopt-slurm-apt.log; echo "slurm: apt-get install failed"; exit 1
  fi
fi
if sinfo -h -o %t 2>/dev/null | grep -q -E '^(idle|mix|alloc)'; then exit 0; fi
install -m 644 "$here/slurm.conf" /etc/slurm/slurm.conf
mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
chown munge:munge /run/munge; chmod 755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
fi
[ -S /run/munge/munge.socket.2 ] || runuser -u munge -- /usr/sbin/munged
for _ in $(seq 1 40); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.25; done
pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld -i
pgrep -x slurmd >/dev/null || /usr/sbin/slurmd -N localhost
for _ in $(seq 1 120); do
  sinfo -h -o %t 2>/dev/null | grep -q -E '^(idle|mix|alloc)' && { echo "slurm: one-node cluster up"; exit 0; }
  sleep 0.25
done
echo "slurm: the node did not come up"; sinfo || true; tail -5 /var/log/slurm/slurmd.log /var/log/slurm/slurmctld.log || true
exit 1
