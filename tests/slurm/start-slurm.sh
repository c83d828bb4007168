#!/usr/bin/env bash
# Idempotent one-node Slurm for gpuwatch's tests (Debian bookworm, Slurm 22.05), no systemd.
#
# Adapted from /work/shared/slurm/start-slurm.sh. Installs what is missing (apt-get update
# first), writes configs, starts munged, MariaDB (or reuses one that already runs),
# slurmdbd, slurmctld, slurmd, slurmrestd, and waits until the node is idle.
# Run as root. Cold (nothing installed) ~1 min, warm (all running) ~2 s.
#
# Env knobs:
#   SLURM_FAKE_GPUS=4        number of fake GPUs (gres gpu:fake:N), 0 = none
#   SLURM_WITH_DBD=1         MariaDB + slurmdbd (sacct); 0 = no accounting
#   SLURM_WITH_REST=1        slurmrestd on unix socket $SLURM_REST_SOCK
#   SLURM_PROCTRACK=auto     auto | cgroup | linuxproc
#   SLURM_CLUSTER=testcluster
#   SLURM_CPUS=<n>           advertise n CPUs (default: max(real, 8); more than real means
#                            config_overrides and no core binding) so 1-CPU jobs run concurrently
#   SLURM_MYSQL_SOCKET=      socket of an already-running MariaDB to reuse (default: probe
#                            /run/mysqld/mysqld.sock, /var/run/mysqld/mysqld.sock, /tmp/mysql.sock;
#                            "none" = TCP only)
#   SLURM_MYSQL_PORT=3306    TCP port probed on 127.0.0.1 when no socket answers
#   SLURM_TEST_USER=alice    user the tests submit as (created, uid 2001), in account
#   SLURM_TEST_ACCOUNT=physics   (added to slurmdbd with the user as its default account)
#   SLURM_START_LOG=/var/log/slurm/start-slurm.log   this script's own log (also on stdout)
set -euo pipefail

NGPU=${SLURM_FAKE_GPUS:-4}
WITH_DBD=${SLURM_WITH_DBD:-1}
WITH_REST=${SLURM_WITH_REST:-1}
PROCTRACK=${SLURM_PROCTRACK:-auto}
AUTO_PT=0; [ "$PROCTRACK" = auto ] && AUTO_PT=1
CLUSTER=${SLURM_CLUSTER:-testcluster}
REST_SOCK=${SLURM_REST_SOCK:-/run/slurmrestd/slurmrestd.sock}
MYSQL_PORT=${SLURM_MYSQL_PORT:-3306}
TEST_USER=${SLURM_TEST_USER:-alice} TEST_ACCOUNT=${SLURM_TEST_ACCOUNT:-physics}
NODE=$(hostname -s)
ETC=/etc/slurm RUN=/run/slurm LOG=/var/log/slurm
STATE=/var/lib/slurm/slurmctld SPOOL=/var/lib/slurm/slurmd
FAKEDIR=/run/slurm-fakegpu
APTLOG=/tmp/slurm-apt.log
OWN_MARIADB=$RUN/mariadbd.pid   # exists only when *this* script started mariadbd
DBPASS=slurmtestpw
START_LOG=${SLURM_START_LOG:-$LOG/start-slurm.log}
T0=$(date +%s)

mkdir -p "$LOG" "$(dirname "$START_LOG")"
# on re-exec (proctrack fallback) stdout already goes through the first run's tee
if [ -z "${_SLURM_START_REEXEC:-}" ]; then : >"$START_LOG"; exec > >(tee -a "$START_LOG") 2>&1; fi
log() { echo "[start-slurm +$(( $(date +%s) - T0 ))s] $*"; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
waitfor() { # waitfor <seconds> <cmd...>
  local t=$1; shift; local end=$(( $(date +%s) + t ))
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -ge "$end" ] && return 1; sleep 0.5; done; }
die() { log "FAILED: $*"; log "logs: $START_LOG, daemons: $LOG/*.log, apt: $APTLOG"; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"
log "logging to $START_LOG (daemon logs in $LOG/, apt output in $APTLOG)"

# ---------- 0. is a MariaDB already running? (reuse it, don't start a second one) ----------
MYSQL_ARGS=() DB_MODE=none
if [ "$WITH_DBD" = 1 ]; then
  probe_db() { command -v mariadb-admin >/dev/null || return 1
    local s
    local socks="${SLURM_MYSQL_SOCKET:-} /run/mysqld/mysqld.sock /var/run/mysqld/mysqld.sock /tmp/mysql.sock"
    [ "${SLURM_MYSQL_SOCKET:-}" = none ] && socks=""
    for s in $socks; do
      if [ -S "$s" ] && mariadb-admin --socket="$s" -uroot ping >/dev/null 2>&1; then
        MYSQL_ARGS=(--socket="$s" -uroot); DB_SOCK=$s; DB_MODE=socket; return 0; fi
    done
    if mariadb-admin -h127.0.0.1 -P"$MYSQL_PORT" --protocol=tcp -uroot ping >/dev/null 2>&1; then
      MYSQL_ARGS=(-h127.0.0.1 -P"$MYSQL_PORT" --protocol=tcp -uroot); DB_MODE=tcp; return 0; fi
    return 1; }
  port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$MYSQL_PORT") 2>/dev/null; }
  if alive "$OWN_MARIADB"; then DB_MODE=own
  elif probe_db; then log "reusing the MariaDB that already runs ($DB_MODE ${DB_SOCK:-127.0.0.1:$MYSQL_PORT})"
  elif port_open || [ -S /run/mysqld/mysqld.sock ]; then
    # a server runs but we cannot talk to it yet: get the client, never start a second server
    if ! command -v mariadb-admin >/dev/null; then
      log "a MySQL/MariaDB server answers on 127.0.0.1:$MYSQL_PORT; installing mariadb-client"
      export DEBIAN_FRONTEND=noninteractive
      { apt-get update -qq && apt-get install -y -qq --no-install-recommends mariadb-client; } >$APTLOG 2>&1 \
        || { tail -30 $APTLOG; die "apt-get install mariadb-client"; }
    fi
    probe_db || die "a database server runs on 127.0.0.1:$MYSQL_PORT but root cannot log in without a password (set SLURM_MYSQL_SOCKET, or SLURM_WITH_DBD=0)"
    log "reusing the MariaDB that already runs ($DB_MODE ${DB_SOCK:-127.0.0.1:$MYSQL_PORT})"
  else DB_MODE=own; fi
fi

# ---------- 1. packages ----------
PKGS="slurm-wlm slurm-client slurmd slurmctld munge"
if [ "$WITH_DBD" = 1 ]; then
  PKGS="$PKGS slurmdbd"
  # a reused server only needs the client tools
  if [ "$DB_MODE" = own ]; then PKGS="$PKGS mariadb-server"; else PKGS="$PKGS mariadb-client"; fi
fi
[ "$WITH_REST" = 1 ] && PKGS="$PKGS slurmrestd curl"
MISSING=""
for p in $PKGS; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || MISSING="$MISSING $p"; done
if [ -n "$MISSING" ]; then
  log "installing:$MISSING (apt output in $APTLOG)"
  export DEBIAN_FRONTEND=noninteractive
  # policy-rc.d: keep the packages' init scripts from starting daemons we start ourselves
  PRC=/usr/sbin/policy-rc.d; ADDED_PRC=0
  if [ ! -e $PRC ]; then printf '#!/bin/sh\nexit 101\n' >$PRC; chmod 755 $PRC; ADDED_PRC=1; fi
  apt-get update -qq >$APTLOG 2>&1 || { tail -30 $APTLOG; die "apt-get update"; }
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $MISSING >>$APTLOG 2>&1 || { tail -30 $APTLOG; die "apt-get install"; }
  [ "$ADDED_PRC" = 1 ] && rm -f $PRC
  log "installed"
fi

# ---------- 2. dirs, fake gpus ----------
mkdir -p $ETC $RUN $LOG $STATE $SPOOL /run/munge /var/log/munge /var/lib/munge
chown slurm:slurm $RUN $LOG $STATE
chown munge:munge /run/munge /var/log/munge /var/lib/munge; chmod 755 /run/munge
if [ "$NGPU" -gt 0 ]; then
  # gres/gpu needs File= pointing to a *character/block device* (file-less GPUs are
  # dropped by slurmd 22.05, regular files give no CUDA_VISIBLE_DEVICES).
  # Symlinks to /dev/null are enough (stat() follows them) and need no CAP_MKNOD.
  mkdir -p $FAKEDIR
  for i in $(seq 0 $((NGPU-1))); do ln -sfn /dev/null $FAKEDIR/gpu$i; done
fi

# ---------- 3. cgroup detection ----------
CGPLUGIN=""
if [ "$PROCTRACK" = auto ]; then
  fstype=$(stat -fc %T /sys/fs/cgroup 2>/dev/null || echo none)
  if [ "$fstype" = tmpfs ] && [ -d /sys/fs/cgroup/freezer ] && [ -d /sys/fs/cgroup/memory ] \
     && mkdir /sys/fs/cgroup/freezer/.slurmprobe 2>/dev/null && rmdir /sys/fs/cgroup/freezer/.slurmprobe; then
    PROCTRACK=cgroup; CGPLUGIN=cgroup/v1
  else
    # cgroup v2 in 22.05 wants a systemd-delegated cgroup; without systemd use linuxproc
    PROCTRACK=linuxproc
  fi
elif [ "$PROCTRACK" = cgroup ]; then
  if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then CGPLUGIN=cgroup/v2; else CGPLUGIN=cgroup/v1; fi
fi
if [ "$PROCTRACK" = cgroup ]; then
  PT="ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
JobAcctGatherType=jobacct_gather/cgroup"
else
  PT="ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/linux"
fi
log "proctrack=$PROCTRACK ${CGPLUGIN}"

# ---------- 4. configs ----------
# node hardware from slurmd -C; configure ~90% of RAM so the node never drains on memory
HW=$(slurmd -C | head -1)
hw() { echo "$HW" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
MEM=$(( $(hw RealMemory) * 9 / 10 ))
# default: at least 8 CPUs, so a 2-core CI runner still runs several 1-CPU test jobs at once
REALCPUS=$(hw CPUs); NCPU=${SLURM_CPUS:-$(( REALCPUS > 8 ? REALCPUS : 8 ))}; OVERRIDE=""; CONSTRAIN_CORES=yes
if [ "$NCPU" -gt "$REALCPUS" ]; then
  NODEHW="CPUs=$NCPU Boards=1 SocketsPerBoard=1 CoresPerSocket=$NCPU ThreadsPerCore=1"
  OVERRIDE="SlurmdParameters=config_overrides"; CONSTRAIN_CORES=no
  if [ "$PROCTRACK" = cgroup ]; then PT=$(echo "$PT" | sed 's#^TaskPlugin=.*#TaskPlugin=task/cgroup#')
  else PT=$(echo "$PT" | sed 's#^TaskPlugin=.*#TaskPlugin=task/none#'); fi
else
  NODEHW="CPUs=$REALCPUS Boards=$(hw Boards) SocketsPerBoard=$(hw SocketsPerBoard) CoresPerSocket=$(hw CoresPerSocket) ThreadsPerCore=$(hw ThreadsPerCore)"
fi
GRES_NODE=""; [ "$NGPU" -gt 0 ] && GRES_NODE="Gres=gpu:fake:$NGPU"
if [ "$WITH_DBD" = 1 ]; then
  ACCT="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageTRES=gres/gpu
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819"
else ACCT="AccountingStorageType=accounting_storage/none"; fi

NEWCONF=$(cat <<CONF
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$STATE
SlurmdSpoolDir=$SPOOL
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
MpiDefault=none
$PT
$OVERRIDE
JobAcctGatherFrequency=5
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
GresTypes=gpu
$ACCT
JobCompType=jobcomp/none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=5
Waittime=0
NodeName=$NODE NodeAddr=127.0.0.1 $NODEHW RealMemory=$MEM $GRES_NODE State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
)
CHANGED=0
put() { # put <file> <content> [mode owner]
  if [ ! -f "$1" ] || [ "$(cat "$1")" != "$2" ]; then printf '%s\n' "$2" >"$1"; CHANGED=1; fi
  if [ -n "${3:-}" ]; then chmod "$3" "$1"; chown "$4" "$1"; fi; true; }
put $ETC/slurm.conf "$NEWCONF"
put $ETC/cgroup.conf "CgroupPlugin=${CGPLUGIN:-autodetect}
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=$CONSTRAIN_CORES
ConstrainRAMSpace=yes
ConstrainDevices=no"
if [ "$NGPU" -gt 0 ]; then put $ETC/gres.conf "NodeName=$NODE Name=gpu Type=fake File=$FAKEDIR/gpu[0-$((NGPU-1))]"
else put $ETC/gres.conf ""; fi
if [ "$WITH_DBD" = 1 ]; then
  # slurmdbd reaches MariaDB with libmariadb: "localhost" = the compiled-in default socket
  # (/run/mysqld/mysqld.sock on Debian); any other socket or a TCP-only server -> 127.0.0.1:port
  if [ "$DB_MODE" = own ] || { [ "$DB_MODE" = socket ] && [ "$(readlink -f "$DB_SOCK")" = /run/mysqld/mysqld.sock ]; }; then
    DBHOST="StorageHost=localhost"
  else DBHOST="StorageHost=127.0.0.1
StoragePort=$MYSQL_PORT"; fi
  put $ETC/slurmdbd.conf "AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=slurm
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
DebugLevel=info
StorageType=accounting_storage/mysql
$DBHOST
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=$DBPASS" 600 slurm:slurm
fi
if [ "$CHANGED" = 1 ]; then
  log "config changed"
  for d in slurmrestd slurmctld slurmd slurmdbd; do   # restart running slurm daemons on change
    if alive $RUN/$d.pid; then pid=$(cat $RUN/$d.pid); kill "$pid"; waitfor 20 bash -c "! kill -0 $pid" || true; rm -f $RUN/$d.pid; fi
  done
fi

# ---------- 5. munge ----------
[ -s /etc/munge/munge.key ] || { dd if=/dev/urandom of=/etc/munge/munge.key bs=128 count=1 2>/dev/null; }
chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
if ! alive /run/munge/munged.pid; then
  log "starting munged"; runuser -u munge -- /usr/sbin/munged
fi
waitfor 20 bash -c 'munge -n | unmunge' || die "munge not working"

# ---------- 6. mariadb + slurmdbd ----------
if [ "$WITH_DBD" = 1 ]; then
  if [ "$DB_MODE" = own ]; then
    mkdir -p /run/mysqld; chown mysql:mysql /run/mysqld
    MYSQL_ARGS=(--socket=/run/mysqld/mysqld.sock -uroot)
    if ! alive "$OWN_MARIADB"; then
      [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >>$LOG/mariadb.log 2>&1
      log "starting mariadbd (log $LOG/mariadb.log)"
      setsid nohup /usr/sbin/mariadbd --user=mysql --pid-file=/run/mysqld/mysqld.pid \
        --socket=/run/mysqld/mysqld.sock --bind-address=127.0.0.1 --port="$MYSQL_PORT" \
        --innodb-buffer-pool-size=512M --innodb-lock-wait-timeout=900 \
        >>$LOG/mariadb.log 2>&1 </dev/null &
      echo $! >"$OWN_MARIADB"   # marks it as ours: stop-slurm.sh stops only a mariadbd we started
    fi
  fi
  waitfor 60 mariadb-admin "${MYSQL_ARGS[@]}" ping || { tail $LOG/mariadb.log 2>/dev/null; die "MariaDB not answering"; }
  mariadb "${MYSQL_ARGS[@]}" -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DBPASS';
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DBPASS';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;" || die "cannot create slurm_acct_db"
  if ! alive $RUN/slurmdbd.pid; then log "starting slurmdbd"; slurmdbd; fi
  waitfor 30 sacctmgr -n list cluster || { tail $LOG/slurmdbd.log; die "slurmdbd not answering"; }
  sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" >/dev/null
fi

# ---------- 6b. the test user (jobs the tests submit run as alice, account physics) ----------
# so that a job's user, uid and account differ from root's (tests/slurm/test_live_*.py)
id "$TEST_USER" >/dev/null 2>&1 || useradd -M -u 2001 -s /bin/bash "$TEST_USER" \
  || die "cannot create the test user $TEST_USER"
if [ "$WITH_DBD" = 1 ] && ! sacctmgr -n -P list assoc user="$TEST_USER" format=account | grep -qx "$TEST_ACCOUNT"; then
  sacctmgr -n -P list account format=account | grep -qx "$TEST_ACCOUNT" \
    || sacctmgr -i add account "$TEST_ACCOUNT" description=test organization=test >/dev/null
  sacctmgr -i add user "$TEST_USER" account="$TEST_ACCOUNT" defaultaccount="$TEST_ACCOUNT" >/dev/null \
    || die "cannot add $TEST_USER to account $TEST_ACCOUNT"
  log "test user $TEST_USER (uid $(id -u "$TEST_USER")), account $TEST_ACCOUNT"
fi

# ---------- 7. slurmctld + slurmd ----------
if ! alive $RUN/slurmctld.pid; then log "starting slurmctld"; slurmctld; fi
waitfor 30 scontrol ping || { tail $LOG/slurmctld.log; die "slurmctld not answering"; }
if ! alive $RUN/slurmd.pid; then log "starting slurmd"; slurmd; fi

# ---------- 8. slurmrestd (unix socket, rest_auth/local) ----------
if [ "$WITH_REST" = 1 ]; then
  mkdir -p "$(dirname "$REST_SOCK")"
  if ! alive $RUN/slurmrestd.pid; then
    rm -f "$REST_SOCK"; log "starting slurmrestd on $REST_SOCK"
    # refuses to run as root unless disable_user_check; jobs submitted via REST run as root
    SLURMRESTD_SECURITY=disable_user_check setsid nohup slurmrestd -a rest_auth/local \
      "unix:$REST_SOCK" >$LOG/slurmrestd.log 2>&1 </dev/null &
    echo $! >$RUN/slurmrestd.pid
  fi
fi

# ---------- 9. wait for idle node ----------
end=$(( $(date +%s) + 60 ))
while :; do
  st=$(sinfo -h -n "$NODE" -o %t 2>/dev/null || true)
  case "$st" in
    idle|mix|alloc) break ;;
    *drain*|*inval*|drng|down*) scontrol update nodename="$NODE" state=resume 2>/dev/null || true ;;
  esac
  if [ "$(date +%s)" -ge "$end" ]; then scontrol show node "$NODE"; tail -20 $LOG/slurmd.log; die "node state '$st'"; fi
  sleep 0.5
done
# auto mode: if a cgroup job step cannot run in this sandbox, fall back to linuxproc
if [ "$AUTO_PT" = 1 ] && [ "$PROCTRACK" = cgroup ] && [ "$CHANGED" = 1 ]; then
  if ! timeout 30 srun -Q -J cgroup-probe -t 1 true >/dev/null 2>&1; then
    log "cgroup job probe failed -> falling back to proctrack/linuxproc"
    scancel -n cgroup-probe 2>/dev/null || true
    exec env SLURM_PROCTRACK=linuxproc _SLURM_START_REEXEC=1 "$0" "$@"
  fi
fi
if [ "$WITH_REST" = 1 ]; then
  waitfor 20 curl -sf --unix-socket "$REST_SOCK" http://localhost/slurm/v0.0.38/ping || { cat $LOG/slurmrestd.log; die "slurmrestd not answering"; }
fi
log "ready: node $NODE $st, proctrack=$PROCTRACK ${CGPLUGIN}, gpus=$NGPU, dbd=$WITH_DBD (mariadb: $DB_MODE), rest=$WITH_REST"
log "logs: $START_LOG, $LOG/{slurmctld,slurmd,slurmdbd,slurmrestd}.log"
