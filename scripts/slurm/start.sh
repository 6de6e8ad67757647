#!/usr/bin/env bash
# Brings up a one-node Slurm cluster on this machine for the tests (root, no systemd):
# installs slurmctld/slurmd/munge from Debian when missing, then munged, slurmctld,
# slurmd -N localhost. Idempotent: a working cluster is left as it is. Every client call
# is bounded, and leftovers of an earlier boot (a munge socket with no munged behind it,
# daemons that started without munge, stale pid files) are cleared, so a machine restored
# from a snapshot neither hangs nor keeps a half-dead cluster.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ "$(id -u)" != 0 ]; then echo "slurm: not root; not starting a cluster"; exit 0; fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  echo "slurm: installing slurmctld slurmd slurm-client munge from Debian"
  if ! { timeout 900 apt-get update -qq &&
         DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq slurmctld slurmd slurm-client munge; } \
      > /tmp/hpcopt-slurm-apt.log 2>&1; then
    tail -20 /tmp/hpcopt-slurm-apt.log; echo "slurm: apt-get install failed"; exit 1
  fi
fi

munge_ok() { timeout 5 munge -n 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1; }
node_up() { timeout 5 sinfo -h -o %t 2>/dev/null | grep -q -E '^(idle|mix|alloc)'; }
# Sends SIGTERM to every process named $1, then SIGKILL to what is left after 5 s.
stop_all() {
  pkill -x "$1" 2>/dev/null || return 0
  for _ in $(seq 1 20); do pgrep -x "$1" >/dev/null || return 0; sleep 0.25; done
  pkill -9 -x "$1" 2>/dev/null || true
}

if munge_ok && node_up; then exit 0; fi
install -m 644 "$here/slurm.conf" /etc/slurm/slurm.conf
mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
chown munge:munge /run/munge; chmod 755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
fi
if ! munge_ok; then
  stop_all munged
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock /run/munge/munged.pid
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 1 40); do munge_ok && break; sleep 0.25; done
  if ! munge_ok; then echo "slurm: munged does not answer"; tail -5 /var/log/munge/munged.log || true; exit 1; fi
fi
# The node is not up: daemons still running were started without munge or with an old
# configuration. Start both afresh; -c drops the jobs of an earlier boot.
stop_all slurmd
stop_all slurmctld
rm -f /run/slurmctld.pid /run/slurmd.pid
/usr/sbin/slurmctld -c -i
/usr/sbin/slurmd -N localhost
for _ in $(seq 1 120); do
  node_up && { echo "slurm: one-node cluster up"; exit 0; }
  sleep 0.25
done
echo "slurm: the node did not come up"; timeout 5 sinfo || true
tail -5 /var/log/slurm/slurmd.log /var/log/slurm/slurmctld.log || true
exit 1
