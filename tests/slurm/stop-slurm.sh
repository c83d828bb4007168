#!/usr/bin/env bash
# Stops the daemons started by tests/slurm/start-slurm.sh, by the PIDs in their pid files.
# A MariaDB that was already running before start-slurm.sh (reused) is left running; only a
# mariadbd that start-slurm.sh started itself (marker /run/slurm/mariadbd.pid) is stopped.
# --purge also removes job state, logs, the slurm_acct_db database and the configs.
set -uo pipefail
RUN=/run/slurm
PURGE=0; [ "${1:-}" = --purge ] && PURGE=1
stop() { # stop <name> <pidfile> <expected comm>
  local f=$2 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$3" ]; then
    echo "stopping $1 ($pid)"; kill "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then echo "  $1 ($pid) did not exit, SIGKILL"; kill -9 "$pid"; fi
  fi
  rm -f "$f"
}
stop slurmrestd $RUN/slurmrestd.pid slurmrestd
stop slurmd     $RUN/slurmd.pid     slurmd
stop slurmctld  $RUN/slurmctld.pid  slurmctld
stop slurmdbd   $RUN/slurmdbd.pid   slurmdbd
if [ "$PURGE" = 1 ] && [ -S /run/mysqld/mysqld.sock ]; then
  mariadb --socket=/run/mysqld/mysqld.sock -uroot -e 'DROP DATABASE IF EXISTS slurm_acct_db' \
    && echo "dropped slurm_acct_db"
fi
if [ -f $RUN/mariadbd.pid ]; then
  stop mariadbd $RUN/mariadbd.pid mariadbd
  rm -f /run/mysqld/mysqld.pid
else
  echo "leaving MariaDB alone (not started by start-slurm.sh)"
fi
stop munged /run/munge/munged.pid munged
if [ "$PURGE" = 1 ]; then
  echo "purging state"
  rm -rf /var/lib/slurm/slurmctld/* /var/lib/slurm/slurmd/* /var/log/slurm/* /run/slurm-fakegpu \
         /run/slurmrestd /etc/slurm/slurm.conf /etc/slurm/cgroup.conf /etc/slurm/gres.conf /etc/slurm/slurmdbd.conf
fi
exit 0
