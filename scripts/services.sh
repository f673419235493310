#!/usr/bin/env bash
# Local ZooKeeper + PostgreSQL 15 + a Kafka broker for tests and examples; data lives in .work/.
# Usage: scripts/services.sh {start|stop|status|env} [zookeeper] [postgres] [kafka]  (idempotent)
#   with names: only those (the main job needs ZooKeeper only); default: all three.
#   Ports: TRIDENT_ZK_PORT (2181), TRIDENT_PG_PORT (54329), TRIDENT_KAFKA_PORT (39092) and
#   TRIDENT_KAFKA_CONTROLLER_PORT (39093). Kafka runs from scripts/jars.sh's jars (docs/jvm.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="$ROOT/.work"
ZK_PORT="${TRIDENT_ZK_PORT:-2181}"
ZK_DIR="$WORK/zookeeper"
ZK_PID="$ZK_DIR/server.pid"
PG_PORT="${TRIDENT_PG_PORT:-54329}"
PG_BIN=/usr/lib/postgresql/15/bin
PG_DIR="$WORK/postgres"
PG_DATA="$PG_DIR/data"
PG_SOCK="$PG_DIR/run"
KAFKA_PORT="${TRIDENT_KAFKA_PORT:-39092}"
KAFKA_CONTROLLER_PORT="${TRIDENT_KAFKA_CONTROLLER_PORT:-39093}"
KAFKA_DIR="$WORK/kafka"
KAFKA_PID="$KAFKA_DIR/server.pid"
KAFKA_JARS="${TRIDENT_JARS_DIR:-$WORK/jars}/kafka"
# A small heap; C1 only (TieredStopAtLevel=1) halves the start (13 -> 6.5 s on a busy 2-core
# machine) at some peak throughput: a benchmark may set TRIDENT_KAFKA_JAVA_OPTS (docs/jvm.md).
KAFKA_JAVA_OPTS="${TRIDENT_KAFKA_JAVA_OPTS:--Xmx256m -Xms64m -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:TieredStopAtLevel=1}"

log() { echo "[services] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

apt_install() {
    [ "$(id -u)" = 0 ] || die "need root to apt-get install $*"
    log "installing $* (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# ---------------------------------------------------------------- ZooKeeper
zk_ok() { # no trailing newline: unread input makes the server reset the socket and lose "imok"
    local _
    for _ in 1 2 3; do
        [ "$(printf ruok | timeout 5 nc -w 2 127.0.0.1 "$ZK_PORT" 2>/dev/null)" = imok ] && return 0
    done
    return 1
}
zk_pid() { # prints our pid if the pid file names a live ZooKeeper process
    local pid
    pid="$(cat "$ZK_PID" 2>/dev/null)" || return 1
    grep -qa ZooKeeperServerMain "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
}

zk_start() {
    if zk_ok; then log "zookeeper: reusing server on 127.0.0.1:$ZK_PORT"; return; fi
    local pkgs=()
    [ -f /usr/share/java/zookeeper.jar ] || pkgs+=(zookeeper)
    command -v nc >/dev/null || pkgs+=(netcat-openbsd)
    [ ${#pkgs[@]} -eq 0 ] || apt_install "${pkgs[@]}"
    mkdir -p "$ZK_DIR/data"
    if zk_pid >/dev/null; then
        grep -qx "clientPort=$ZK_PORT" "$ZK_DIR/zoo.cfg" ||
            die "our zookeeper (pid $(zk_pid)) uses another port; run '$0 stop' first"
    else
        cat >"$ZK_DIR/zoo.cfg" <<EOF
tickTime=2000
dataDir=$ZK_DIR/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,stat,srvr,mntr,envi
EOF
        local cp=/etc/zookeeper/conf:/usr/share/java/zookeeper.jar
        [ -f /usr/share/java/slf4j-simple.jar ] && cp="$cp:/usr/share/java/slf4j-simple.jar"
        log "zookeeper: starting on 127.0.0.1:$ZK_PORT (log: $ZK_DIR/server.log)"
        # setsid: detach from our process group so the server outlives this script.
        (close_inherited_fds; exec setsid java -Xmx512m -cp "$cp" \
            org.apache.zookeeper.server.ZooKeeperServerMain "$ZK_DIR/zoo.cfg") \
            >"$ZK_DIR/server.log" 2>&1 </dev/null &
        echo $! >"$ZK_PID"
    fi
    for _ in $(seq 60); do
        zk_ok && { log "zookeeper: up (pid $(zk_pid))"; return; }
        zk_pid >/dev/null || break
        sleep 0.5
    done
    tail -n 30 "$ZK_DIR/server.log" >&2 || true
    die "zookeeper did not answer 'ruok' on 127.0.0.1:$ZK_PORT (log tail above)"
}

zk_stop() {
    local pid
    if ! pid="$(zk_pid)"; then log "zookeeper: no server started by us is running"; rm -f "$ZK_PID"; return; fi
    log "zookeeper: stopping pid $pid"
    kill "$pid"
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    rm -f "$ZK_PID"
}

zk_status() {
    local pid; pid="$(zk_pid || echo none)"
    if zk_ok; then echo "zookeeper: RUNNING 127.0.0.1:$ZK_PORT (our pid: $pid)"
    else echo "zookeeper: STOPPED (127.0.0.1:$ZK_PORT does not answer ruok; our pid: $pid)"; fi
}

# ---------------------------------------------------------------- PostgreSQL
close_inherited_fds() { # in a subshell: close every fd above 2 that a caller passed down, so
    # a server started here never keeps a caller's lock (`flock /tmp/x bash scripts/test.sh`)
    local fd
    for fd in /proc/"$BASHPID"/fd/*; do
        fd=${fd##*/}
        if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
}
as_pg() { # run a command as the postgres OS user (from / so cwd is always readable)
    if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else (cd / && "$@"); fi
}
pg_running() { [ -f "$PG_DATA/PG_VERSION" ] && as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; }
pg_ready() { "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT"; }

pg_init() {
    [ -x "$PG_BIN/initdb" ] || apt_install postgresql-15
    mkdir -p "$PG_SOCK" "$PG_DATA"
    if [ "$(id -u)" = 0 ]; then
        chown -R postgres:postgres "$PG_DIR"
        # postgres must be able to traverse every parent of the project directory.
        local d="" part parts
        IFS=/ read -ra parts <<<"${WORK#/}"
        for part in "${parts[@]}"; do  # top-down: /a, /a/b, ...
            d="$d/$part"
            runuser -u postgres -- test -x "$d" || { log "chmod o+x $d"; chmod o+x "$d"; }
        done
    fi
    chmod 700 "$PG_DATA"
    if [ ! -f "$PG_DATA/PG_VERSION" ]; then
        log "postgres: initdb $PG_DATA"
        as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U postgres -E UTF8 --no-locale \
            --auth-local=peer --auth-host=scram-sha-256 >"$PG_DIR/initdb.log"
        echo "include 'trident.conf'" >>"$PG_DATA/postgresql.conf"
    fi
    # Rewritten on every start so a changed TRIDENT_PG_PORT takes effect; fsync left at default.
    cat >"$PG_DATA/trident.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_SOCK'
max_wal_size = '2GB'
EOF
    [ "$(id -u)" != 0 ] || chown postgres:postgres "$PG_DATA/trident.conf"
}

pg_start() {
    if pg_running; then
        [ "$(sed -n 4p "$PG_DATA/postmaster.pid")" = "$PG_PORT" ] ||
            die "our cluster runs on another port; run '$0 stop' first"
        log "postgres: reusing running cluster $PG_DATA"
    else
        pg_ready && die "port $PG_PORT is used by another PostgreSQL; set TRIDENT_PG_PORT"
        pg_init
        log "postgres: starting on 127.0.0.1:$PG_PORT (log: $PG_DIR/server.log)"
        if ! (close_inherited_fds; as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_DIR/server.log" \
                -w -t 30 start >/dev/null); then
            tail -n 30 "$PG_DIR/server.log" >&2 || true
            die "postgres did not start (log tail above)"
        fi
    fi
    for _ in $(seq 60); do pg_ready && break; sleep 0.5; done
    pg_ready || die "pg_isready -h 127.0.0.1 -p $PG_PORT fails"
    # Role and database, idempotently; the password goes through stdin, never argv.
    as_pg "$PG_BIN/psql" -X -q -h "$PG_SOCK" -p "$PG_PORT" -d postgres -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
SELECT 'CREATE ROLE trident' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'trident')\gexec
ALTER ROLE trident WITH LOGIN CREATEDB PASSWORD 'trident';
SELECT 'CREATE DATABASE trident OWNER trident'
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = 'trident')\gexec
SQL
    log "postgres: up (database trident, role trident)"
}

pg_stop() {
    if pg_running; then
        log "postgres: stopping $PG_DATA"
        as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w stop >/dev/null
    else
        log "postgres: not running"
    fi
}

pg_status() {
    if pg_running; then echo "postgres: RUNNING 127.0.0.1:$PG_PORT ($PG_DATA)"
    elif pg_ready; then echo "postgres: FOREIGN server on 127.0.0.1:$PG_PORT (not $PG_DATA)"
    else echo "postgres: STOPPED"; fi
}

# ---------------------------------------------------------------- Kafka (KRaft, one node)
# One JVM is broker and controller (process.roles=broker,controller) in a static quorum of
# itself, from the jars of `scripts/jars.sh kafka`; replication factor 1 and min ISR 1 for the
# internal topics, so consumer groups and transactional producers work on one node. Its data
# directory is formatted once (data/meta.properties), its log is server.log (log4j2.properties).
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
kafka_pid() { # prints our pid if the pid file names a live Kafka broker
    local pid
    pid="$(cat "$KAFKA_PID" 2>/dev/null)" || return 1
    grep -qa kafka.Kafka "/proc/$pid/cmdline" 2>/dev/null && echo "$pid"
}
kafka_serving() { # the port is open and our broker logged that it serves (the port opens first)
    port_open "$KAFKA_PORT" && grep -q "Kafka Server started" "$KAFKA_DIR/server.log" 2>/dev/null
}
kafka_java() { # java with the broker's class path, heap and logging
    # shellcheck disable=SC2086 # KAFKA_JAVA_OPTS: several options
    java $KAFKA_JAVA_OPTS -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="file:$KAFKA_DIR/log4j2.properties" -cp "$KAFKA_JARS/*" "$@"
}

kafka_config() { # rewritten on every start, so a changed TRIDENT_KAFKA_PORT takes effect
    mkdir -p "$KAFKA_DIR/data"
    cat >"$KAFKA_DIR/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$KAFKA_DIR/data
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.check.interval.ms=5000
EOF
    cat >"$KAFKA_DIR/log4j2.properties" <<EOF
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = $KAFKA_DIR/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.request.name = kafka.request.logger
logger.request.level = WARN
EOF
}

kafka_start() {
    mkdir -p "$KAFKA_DIR"
    exec 7>"$KAFKA_DIR/.start.lock"  # two starts at once: one starts, the other reuses it
    flock 7
    # the broker's jars, also when a broker is reused: the tests' private brokers need them too
    ls "$KAFKA_JARS"/.resolved-* >/dev/null 2>&1 || bash "$ROOT/scripts/jars.sh" kafka
    if kafka_pid >/dev/null; then
        grep -qx "listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,.*" "$KAFKA_DIR/server.properties" ||
            die "our kafka (pid $(kafka_pid)) uses another port; run '$0 stop kafka' first"
        kafka_serving && { log "kafka: reusing our broker on 127.0.0.1:$KAFKA_PORT"; return; }
    elif port_open "$KAFKA_PORT"; then
        log "kafka: reusing the server on 127.0.0.1:$KAFKA_PORT (not started from $KAFKA_DIR)"
        return
    else
        port_open "$KAFKA_CONTROLLER_PORT" &&
            die "port $KAFKA_CONTROLLER_PORT is in use; set TRIDENT_KAFKA_CONTROLLER_PORT"
        kafka_config
        if [ ! -f "$KAFKA_DIR/data/meta.properties" ]; then
            [ -s "$KAFKA_DIR/cluster.id" ] || kafka_java kafka.tools.StorageTool random-uuid \
                2>/dev/null | tail -n 1 >"$KAFKA_DIR/cluster.id"
            log "kafka: formatting $KAFKA_DIR/data (cluster id $(cat "$KAFKA_DIR/cluster.id"))"
            kafka_java kafka.tools.StorageTool format --ignore-formatted \
                -t "$(cat "$KAFKA_DIR/cluster.id")" -c "$KAFKA_DIR/server.properties" \
                >"$KAFKA_DIR/format.log" 2>&1 ||
                { cat "$KAFKA_DIR/format.log" >&2; die "kafka: formatting $KAFKA_DIR/data failed"; }
        fi
        : >"$KAFKA_DIR/server.log"
        log "kafka: starting on 127.0.0.1:$KAFKA_PORT (log: $KAFKA_DIR/server.log)"
        # setsid: detach from our process group so the broker outlives this script.
        # shellcheck disable=SC2086 # KAFKA_JAVA_OPTS: several options
        (close_inherited_fds; cd "$KAFKA_DIR" && exec setsid java $KAFKA_JAVA_OPTS \
            -Djava.awt.headless=true \
            -Dlog4j2.configurationFile="file:$KAFKA_DIR/log4j2.properties" \
            -cp "$KAFKA_JARS/*" kafka.Kafka "$KAFKA_DIR/server.properties") \
            >"$KAFKA_DIR/stdout.log" 2>&1 </dev/null &
        echo $! >"$KAFKA_PID"
    fi
    for _ in $(seq 240); do
        kafka_serving && { log "kafka: up (pid $(kafka_pid))"; return; }
        kafka_pid >/dev/null || break
        sleep 0.25
    done
    tail -n 30 "$KAFKA_DIR/server.log" "$KAFKA_DIR/stdout.log" >&2 || true
    die "kafka did not start on 127.0.0.1:$KAFKA_PORT (log tails above)"
}

kafka_stop() {
    local pid
    if ! pid="$(kafka_pid)"; then log "kafka: no broker started by us is running"; rm -f "$KAFKA_PID"; return; fi
    log "kafka: stopping pid $pid"
    kill "$pid"  # a controlled shutdown
    for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    rm -f "$KAFKA_PID"
}

kafka_status() {
    local pid; pid="$(kafka_pid || echo none)"
    if port_open "$KAFKA_PORT"; then echo "kafka: RUNNING 127.0.0.1:$KAFKA_PORT (our pid: $pid)"
    else echo "kafka: STOPPED (127.0.0.1:$KAFKA_PORT closed; our pid: $pid)"; fi
}

case "${1:-}" in
    start|stop|status)
        action=$1
        shift
        [ $# -gt 0 ] || set -- zookeeper postgres kafka
        for service in "$@"; do
            case "$service" in
                zookeeper) "zk_$action" ;;
                postgres) "pg_$action" ;;
                kafka) "kafka_$action" ;;
                *) die "unknown service '$service' (zookeeper, postgres, kafka)" ;;
            esac
        done ;;
    env)
        echo "export TRIDENT_ZK_HOSTS=127.0.0.1:$ZK_PORT"
        echo "export TRIDENT_PG_URL=postgresql+psycopg://trident:trident@127.0.0.1:$PG_PORT/trident"
        echo "export TRIDENT_KAFKA_BOOTSTRAP=127.0.0.1:$KAFKA_PORT"
        ;;
    *) echo "usage: $0 {start|stop|status|env} [zookeeper] [postgres] [kafka]" >&2; exit 2 ;;
esac
