#!/usr/bin/env bash
# Local ZooKeeper + PostgreSQL 15 for tests and examples; data lives in .work/.
# Usage: scripts/services.sh {start|stop|status|env} [zookeeper] [postgres]   (all idempotent)
#   start with names starts only those (the main job needs ZooKeeper only); default: both.
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

case "${1:-}" in
    start)
        shift
        [ $# -gt 0 ] || set -- zookeeper postgres
        for service in "$@"; do
            case "$service" in
                zookeeper) zk_start ;;
                postgres) pg_start ;;
                *) die "unknown service '$service' (zookeeper, postgres)" ;;
            esac
        done ;;
    stop) zk_stop; pg_stop ;;
    status) zk_status; pg_status ;;
    env)
        echo "export TRIDENT_ZK_HOSTS=127.0.0.1:$ZK_PORT"
        echo "export TRIDENT_PG_URL=postgresql+psycopg://trident:trident@127.0.0.1:$PG_PORT/trident"
        ;;
    *) echo "usage: $0 {start|stop|status|env}" >&2; exit 2 ;;
esac
