#!/usr/bin/env bash
# A local multi-process cluster on loopback, for the cluster tests and for trying a deployment:
# a Spark standalone master + two workers (from the pyspark wheel of .venv) and a 3-node
# ZooKeeper ensemble (Debian's zookeeper jars). See docs/deployment.md.
#
# Usage: scripts/cluster.sh {start|stop|status|env}
#   start   start what is not running (idempotent: a second start says so and succeeds; a
#           killed worker or ZooKeeper node is started again)
#   stop    stop what this script started (by the process groups in its pid files), nothing else
#   status  one line per process; exit 1 if any is down
#   env     export lines: TRIDENT_SPARK_MASTER, TRIDENT_ZK_ENSEMBLE, TRIDENT_CLUSTER_DIR
#
# Environment:
#   TRIDENT_CLUSTER_DIR        state, logs and pid files (default /tmp/trident-cluster-$UID)
#   TRIDENT_CLUSTER_PORT_BASE  port base (default 17000): Spark master base+77, its UI base+80,
#                              worker UIs base+81.., ZooKeeper clients base+181..183, quorum
#                              base+891..893 and election base+991..993 (no clash with the
#                              shared services: ZooKeeper 2181/2182, PostgreSQL 54329/54330,
#                              Spark UIs 4040+)
#
# Components are functions start_<c>, stop_<c>, status_<c>, env_<c> for each <c> of COMPONENTS,
# started in that order and stopped in reverse. scripts/cluster-celery.sh, when present, is
# sourced and may add its own (COMPONENTS+=(redis celery) with start_redis, ...).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
VENV="${TRIDENT_VENV:-$ROOT/.venv}"
CLUSTER_DIR="${TRIDENT_CLUSTER_DIR:-/tmp/trident-cluster-$(id -u)}"
PORT_BASE="${TRIDENT_CLUSTER_PORT_BASE:-17000}"
PIDS="$CLUSTER_DIR/pids"
LOGS="$CLUSTER_DIR/logs"
READY_TIMEOUT_S=90
# Executors and Celery workers load topologies by module reference; the cluster tests' live in
# tests/harness (not installed): the project root goes on the PYTHONPATH every process inherits.
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

SPARK_PORT=$((PORT_BASE + 77))
SPARK_UI_PORT=$((PORT_BASE + 80))
SPARK_WORKERS=2
ZK_NODES=3

COMPONENTS=(spark zookeeper)

log() { echo "[cluster] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ------------------------------------------------------------------ processes by pid file
# Each process is started with setsid: its pid is its process group id, and stopping it signals
# that group (a Spark worker's executors and their Python workers die with it).
pid_of() { # <name> <cmdline pattern>: prints the pid if the pid file names a live match
    local pid
    pid="$(cat "$PIDS/$1.pid" 2>/dev/null)" || return 1
    [ -n "$pid" ] && grep -qa -- "$2" "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
}
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
launch() { # <name> <command...>: start in a new session, log to $LOGS/<name>.log
    local name="$1"
    shift
    mkdir -p "$PIDS" "$LOGS"
    (
        # Inherit no descriptor but 0-2: a daemon holding the caller's `flock` descriptor
        # would keep that lock until it stops.
        for fd in $(ls "/proc/$BASHPID/fd"); do
            [ "$fd" -gt 2 ] && eval "exec $fd>&-"
        done
        exec setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1
    ) &
    echo $! >"$PIDS/$name.pid"
}
wait_for() { # <what> <name> <pattern> <check command...>: until the check passes or it dies
    local what="$1" name="$2" pattern="$3" deadline=$((SECONDS + READY_TIMEOUT_S))
    shift 3
    until "$@"; do
        if ! pid_of "$name" "$pattern" >/dev/null; then
            tail -n 20 "$LOGS/$name.log" >&2 || true
            die "$what exited; log $LOGS/$name.log"
        fi
        [ $SECONDS -lt $deadline ] || die "$what not ready after ${READY_TIMEOUT_S}s; log $LOGS/$name.log"
        sleep 0.3
    done
}
stop_group() { # <name> <pattern> <what>: TERM the group, KILL it after 15 s, remove the pid file
    local name="$1" pattern="$2" what="$3" pid i
    if ! pid="$(pid_of "$name" "$pattern")"; then
        rm -f "$PIDS/$name.pid"
        return 0
    fi
    kill -TERM -- "-$pid" 2>/dev/null || true
    for i in $(seq 1 50); do
        kill -0 -- "-$pid" 2>/dev/null || break
        sleep 0.3
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
    rm -f "$PIDS/$name.pid"
    log "$what: stopped (pid $pid)"
}
status_line() { # <name> <pattern> <what> <detail>: prints one line, returns 1 if down
    local pid
    if pid="$(pid_of "$1" "$2")"; then
        echo "$3: running (pid $pid) $4"
    else
        echo "$3: stopped"
        return 1
    fi
}

# ------------------------------------------------------------------ Spark standalone
spark_env() {
    [ -x "$VENV/bin/spark-class" ] || die "no $VENV/bin/spark-class: run 'bash scripts/bootstrap.sh'"
    SPARK_HOME="$(echo "$VENV"/lib/python3*/site-packages/pyspark)"
    [ -d "$SPARK_HOME" ] || die "pyspark not found in $VENV"
    export SPARK_HOME PYSPARK_PYTHON="$VENV/bin/python" SPARK_LOCAL_IP=127.0.0.1
    export SPARK_LOCAL_DIRS="$CLUSTER_DIR/spark/local" SPARK_LOG_DIR="$LOGS"
    export PATH="$VENV/bin:$PATH"
    # No REST submission server (it would open 6066 on every interface).
    export SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false"
    mkdir -p "$SPARK_LOCAL_DIRS"
}
spark_master_url() { echo "spark://127.0.0.1:$SPARK_PORT"; }
log_has() { grep -q -- "$2" "$LOGS/$1.log" 2>/dev/null; }

start_spark() {
    spark_env
    local pid i name
    if pid="$(pid_of spark-master deploy.master.Master)"; then
        log "spark master: already running (pid $pid) at $(spark_master_url)"
    else
        port_busy "$SPARK_PORT" && die "port $SPARK_PORT is taken by another process (set TRIDENT_CLUSTER_PORT_BASE)"
        : >"$LOGS/spark-master.log" 2>/dev/null || true
        launch spark-master "$VENV/bin/spark-class" org.apache.spark.deploy.master.Master \
            --host 127.0.0.1 --port "$SPARK_PORT" --webui-port "$SPARK_UI_PORT"
        wait_for "spark master" spark-master deploy.master.Master \
            log_has spark-master "I have been elected leader"
        log "spark master: started (pid $(cat "$PIDS/spark-master.pid")) at $(spark_master_url)"
    fi
    for i in $(seq 1 "$SPARK_WORKERS"); do
        name="spark-worker$i"
        if pid="$(pid_of "$name" deploy.worker.Worker)"; then
            log "spark worker $i: already running (pid $pid)"
            continue
        fi
        mkdir -p "$CLUSTER_DIR/spark/$name"
        : >"$LOGS/$name.log"
        launch "$name" "$VENV/bin/spark-class" org.apache.spark.deploy.worker.Worker \
            "$(spark_master_url)" --host 127.0.0.1 --cores 1 --memory 1g \
            --work-dir "$CLUSTER_DIR/spark/$name" --webui-port "$((SPARK_UI_PORT + i))"
    done
    for i in $(seq 1 "$SPARK_WORKERS"); do
        name="spark-worker$i"
        wait_for "spark worker $i" "$name" deploy.worker.Worker \
            log_has "$name" "Successfully registered with master"
        log "spark worker $i: registered (pid $(cat "$PIDS/$name.pid"))"
    done
}
stop_spark() {
    local i
    for i in $(seq "$SPARK_WORKERS" -1 1); do
        stop_group "spark-worker$i" deploy.worker.Worker "spark worker $i"
    done
    stop_group spark-master deploy.master.Master "spark master"
}
status_spark() {
    local i rc=0
    status_line spark-master deploy.master.Master "spark master" "$(spark_master_url)" || rc=1
    for i in $(seq 1 "$SPARK_WORKERS"); do
        status_line "spark-worker$i" deploy.worker.Worker "spark worker $i" \
            "work dir $CLUSTER_DIR/spark/spark-worker$i" || rc=1
    done
    return $rc
}
env_spark() { echo "export TRIDENT_SPARK_MASTER=$(spark_master_url)"; }

# ------------------------------------------------------------------ ZooKeeper ensemble
zk_client_port() { echo $((PORT_BASE + 180 + $1)); }
zk_hosts() {
    local i hosts=()
    for i in $(seq 1 "$ZK_NODES"); do hosts+=("127.0.0.1:$(zk_client_port "$i")"); done
    (IFS=,; echo "${hosts[*]}")
}
zk_four() { printf '%s' "$2" | timeout 5 nc -w 2 127.0.0.1 "$(zk_client_port "$1")" 2>/dev/null; }
zk_mode() { zk_four "$1" srvr | sed -n 's/^Mode: //p'; }
zk_serving() { # every node is a leader or a follower
    local i
    for i in $(seq 1 "$ZK_NODES"); do
        case "$(zk_mode "$i")" in leader | follower) ;; *) return 1 ;; esac
    done
}
zk_config() { # <node>: the same settings as tests.harness.servers.ZooKeeperEnsembleNode
    local i="$1" dir="$CLUSTER_DIR/zookeeper/node$1" j
    mkdir -p "$dir/data"
    echo "$i" >"$dir/data/myid"
    {
        echo "tickTime=2000"
        echo "dataDir=$dir/data"
        echo "clientPort=$(zk_client_port "$i")"
        echo "clientPortAddress=127.0.0.1"
        echo "admin.enableServer=false"
        echo "preAllocSize=4096"
        echo "initLimit=10"
        echo "syncLimit=5"
        echo "4lw.commands.whitelist=ruok,stat,srvr,cons"
        for j in $(seq 1 "$ZK_NODES"); do
            echo "server.$j=127.0.0.1:$((PORT_BASE + 890 + j)):$((PORT_BASE + 990 + j))"
        done
    } >"$dir/zoo.cfg"
}
start_zookeeper() {
    [ -f /usr/share/java/zookeeper.jar ] && command -v nc >/dev/null ||
        die "needs the zookeeper and netcat-openbsd packages: run 'bash scripts/services.sh start'"
    local i pid cp=/etc/zookeeper/conf:/usr/share/java/zookeeper.jar
    [ -f /usr/share/java/slf4j-simple.jar ] && cp="$cp:/usr/share/java/slf4j-simple.jar"
    for i in $(seq 1 "$ZK_NODES"); do
        if pid="$(pid_of "zookeeper$i" QuorumPeerMain)"; then
            log "zookeeper $i: already running (pid $pid) on 127.0.0.1:$(zk_client_port "$i")"
            continue
        fi
        port_busy "$(zk_client_port "$i")" &&
            die "port $(zk_client_port "$i") is taken by another process (set TRIDENT_CLUSTER_PORT_BASE)"
        zk_config "$i"
        (cd "$CLUSTER_DIR/zookeeper/node$i" && launch "zookeeper$i" java -Xmx256m -cp "$cp" \
            org.apache.zookeeper.server.quorum.QuorumPeerMain "$CLUSTER_DIR/zookeeper/node$i/zoo.cfg")
        log "zookeeper $i: started (pid $(cat "$PIDS/zookeeper$i.pid")) on 127.0.0.1:$(zk_client_port "$i")"
    done
    wait_for "zookeeper 1" zookeeper1 QuorumPeerMain zk_serving
    log "zookeeper ensemble: serving on $(zk_hosts)"
}
stop_zookeeper() {
    local i
    for i in $(seq "$ZK_NODES" -1 1); do stop_group "zookeeper$i" QuorumPeerMain "zookeeper $i"; done
}
status_zookeeper() {
    local i rc=0
    for i in $(seq 1 "$ZK_NODES"); do
        status_line "zookeeper$i" QuorumPeerMain "zookeeper $i" \
            "127.0.0.1:$(zk_client_port "$i") mode=$(zk_mode "$i")" || rc=1
    done
    return $rc
}
env_zookeeper() { echo "export TRIDENT_ZK_ENSEMBLE=$(zk_hosts)"; }

# ------------------------------------------------------------------ more components
# shellcheck source=/dev/null
[ -f "$HERE/cluster-celery.sh" ] && source "$HERE/cluster-celery.sh"

# ------------------------------------------------------------------ dispatch
main() {
    local c rc=0 i
    case "${1:-}" in
    start)
        mkdir -p "$PIDS" "$LOGS"
        for c in "${COMPONENTS[@]}"; do "start_$c"; done
        log "ready; state in $CLUSTER_DIR ('$0 env' prints the settings)"
        ;;
    stop)
        for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do "stop_${COMPONENTS[$i]}"; done
        ;;
    status)
        for c in "${COMPONENTS[@]}"; do "status_$c" || rc=1; done
        return $rc
        ;;
    env)
        echo "export TRIDENT_CLUSTER_DIR=$CLUSTER_DIR"
        for c in "${COMPONENTS[@]}"; do "env_$c"; done
        ;;
    *)
        echo "usage: $0 {start|stop|status|env}" >&2
        return 2
        ;;
    esac
}
main "$@"
