#!/usr/bin/env bash
# A single-node SLURM cluster on this host, for the SLURM integration test (tests/test_slurm.py).
#
#   tests/slurm_cluster.sh install        # apt-get: slurmctld slurmd slurm-client munge (root)
#   eval "$(tests/slurm_cluster.sh start)" # start munged, slurmctld, slurmd; prints the exports
#   tests/slurm_cluster.sh status         # sinfo of the running cluster
#   tests/slurm_cluster.sh stop           # stop the daemons by the PIDs recorded at start
#
# Everything lives in $ATTNSCOPE_SLURM_DIR (default /tmp/attnscope-slurm): slurm.conf, a private
# munge key and socket, state, spool, logs and PID files. The one system path is
# /etc/slurm/slurm.conf, a symlink to that slurm.conf (created only where no slurm.conf
# exists, removed by `stop`): Snakemake's jobstep executor drops SLURM_* variables,
# SLURM_CONF included, before it calls srun inside a job, so srun must find the
# default path. `start` prints `export SLURM_CONF=... ATTNSCOPE_SLURM=1` (the test then
# treats a missing cluster as a failure, not a skip).
# The node is this host (NodeName from `hostname -s`, NodeAddr 127.0.0.1, CPUs and memory
# from `slurmd -C`) in one partition `debug` without GPUs; no accounting (jobs are
# tracked with squeue, so MinJobAge keeps finished jobs visible for an hour).
# Every wait is bounded: a daemon that does not come up fails `start` with its log.
set -euo pipefail

DIR=${ATTNSCOPE_SLURM_DIR:-/tmp/attnscope-slurm}
CONF=$DIR/slurm.conf
SYSTEM_CONF=/etc/slurm/slurm.conf
SOCKET=$DIR/munge/munge.socket
START_TIMEOUT=${ATTNSCOPE_SLURM_START_TIMEOUT:-60}
export SLURM_CONF=$CONF

die() {
    echo "slurm_cluster.sh: $*" >&2
    exit 1
}

install() {
    [[ $(id -u) == 0 ]] || die "install needs root (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >/dev/null
    # Where systemd runs, the packages' own services must not race the hand-started daemons.
    if [[ -d /run/systemd/system ]]; then
        systemctl disable --now slurmctld slurmd >/dev/null 2>&1 || true
    fi
}

write_conf() {
    local node memory cpus
    node=$(hostname -s)
    # slurmd -C prints this host's hardware as a NodeName line; keep CPUs and memory.
    cpus=$(slurmd -C | grep -o 'CPUs=[0-9]*' | cut -d= -f2)
    memory=$(slurmd -C | grep -o 'RealMemory=[0-9]*' | cut -d= -f2)
    cat >"$CONF" <<EOF
# Written by tests/slurm_cluster.sh: a single-node test cluster on $node.
ClusterName=attnscope
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=${ATTNSCOPE_SLURMCTLD_PORT:-6817}
SlurmdPort=${ATTNSCOPE_SLURMD_PORT:-6818}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCKET
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups in a container: track processes by their parent, bind no tasks.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# Without accounting, squeue is the only status source: keep finished jobs for an hour.
MinJobAge=3600
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SlurmdTimeout=300
InactiveLimit=0
KillWait=10
Waittime=0
MpiDefault=none
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: poll until COMMAND (itself bounded) succeeds
    local deadline=$((SECONDS + $1)) what=$2
    shift 2
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || {
            echo "slurm_cluster.sh: timed out waiting for $what" >&2
            return 1
        }
        sleep 1
    done
}

start_daemon() {  # start_daemon NAME COMMAND...: run in the foreground of a new session
    setsid "${@:2}" >"$DIR/log/$1.out" 2>&1 </dev/null &
    echo $! >"$DIR/$1.daemon.pid"
}

node_idle() {
    [[ $(timeout 10 sinfo -h -N -o %T 2>/dev/null) == idle* ]]
}

start() {
    [[ $(id -u) == 0 ]] || die "start needs root (slurmd runs jobs as their users)"
    for cmd in munged slurmctld slurmd sbatch squeue; do
        command -v "$cmd" >/dev/null || die "$cmd not found; run: tests/slurm_cluster.sh install"
    done
    if [[ -f $DIR/slurmctld.daemon.pid ]] && kill -0 "$(cat "$DIR/slurmctld.daemon.pid")" 2>/dev/null; then
        die "a cluster is already running from $DIR; stop it first"
    fi
    if [[ -e $SYSTEM_CONF || -L $SYSTEM_CONF ]] && [[ $(readlink "$SYSTEM_CONF") != "$CONF" ]]; then
        die "$SYSTEM_CONF exists and is not this test cluster's; refusing to replace it"
    fi
    [[ ! -e $DIR || -f $DIR/slurm.conf ]] || die "$DIR exists and holds no test cluster; set ATTNSCOPE_SLURM_DIR"
    rm -rf "$DIR"
    mkdir -p "$DIR"/{state,spool,log,munge} "$(dirname "$SYSTEM_CONF")"
    chmod 700 "$DIR/munge"
    write_conf
    ln -sfn "$CONF" "$SYSTEM_CONF"
    # A private munge key and socket, so the host's munge setup is neither needed nor touched.
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$DIR/munge/munge.key"
    start_daemon munged munged --foreground --force --socket="$SOCKET" \
        --key-file="$DIR/munge/munge.key" --pid-file="$DIR/munge/munged.pid" \
        --seed-file="$DIR/munge/munged.seed" --log-file="$DIR/log/munged.log"
    wait_for 20 munged test -S "$SOCKET" || fail_start munged
    start_daemon slurmctld slurmctld -D -f "$CONF"
    wait_for "$START_TIMEOUT" slurmctld timeout 10 scontrol ping || fail_start slurmctld
    start_daemon slurmd slurmd -D -f "$CONF"
    wait_for "$START_TIMEOUT" "an idle node" node_idle || {
        scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
        wait_for 20 "an idle node" node_idle || fail_start slurmd
    }
    # One real job through the whole path (submit, run, report) before declaring success.
    timeout 60 srun --quiet -N1 -n1 -t 1 true || fail_start "a test job (srun true)"
    echo "export SLURM_CONF=$CONF ATTNSCOPE_SLURM=1"
    echo "single-node SLURM cluster up: $(sinfo -h -o '%P %D %c CPUs %m MB %T')" >&2
}

fail_start() {
    echo "slurm_cluster.sh: $1 did not come up; logs:" >&2
    tail -n 20 "$DIR"/log/* >&2 || true
    stop >&2 || true
    exit 1
}

stop() {
    # Jobs first (only this cluster's), then the daemons in reverse order, by recorded PID.
    if [[ -f $DIR/slurmctld.daemon.pid ]] && command -v scancel >/dev/null; then
        timeout 10 scancel --user="${SUDO_USER:-$(id -un)}" >/dev/null 2>&1 || true
    fi
    local name pid
    for name in slurmd slurmctld munged; do
        [[ -f $DIR/$name.daemon.pid ]] || continue
        pid=$(cat "$DIR/$name.daemon.pid")
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid"
            wait_for 20 "$name to exit" bash -c "! kill -0 $pid" || kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$DIR/$name.daemon.pid"
    done
    if [[ $(readlink "$SYSTEM_CONF" 2>/dev/null) == "$CONF" ]]; then
        rm -f "$SYSTEM_CONF"
    fi
}

status() {
    [[ -f $CONF ]] || die "no cluster in $DIR"
    timeout 10 sinfo
    timeout 10 squeue
}

case ${1:-} in
    install | start | stop | status) "$1" ;;
    *) die "usage: $0 install|start|stop|status" ;;
esac
