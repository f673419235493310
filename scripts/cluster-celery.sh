# Sourced by scripts/cluster.sh (not run on its own): with TRIDENT_CLUSTER_CELERY=1, the local
# cluster adds a Redis broker (Debian's redis-server, 127.0.0.1:PORT_BASE+379) and two Airflow
# Celery workers (`airflow celery worker`, node names worker1@<host>, worker2@<host>), for an
# Airflow whose scheduler runs the CeleryExecutor. See docs/deployment.md, "CeleryExecutor".
#
#   export AIRFLOW_HOME=...                  # the workers use your Airflow's configuration
#   export TRIDENT_CLUSTER_CELERY=1
#   eval "$(bash scripts/cluster.sh env)"    # AIRFLOW__CORE__EXECUTOR=CeleryExecutor, broker...
#   bash scripts/cluster.sh start            # + redis, celery workers (after Spark, ZooKeeper)
#   airflow api-server & airflow scheduler & airflow dag-processor & airflow triggerer &
#   bash scripts/cluster.sh stop             # stops the workers and Redis too
#
# Environment: TRIDENT_CELERY_WORKERS (default 2), TRIDENT_CELERY_CONCURRENCY (task slots per
# worker, default 2). Results go to Redis database 1 (no SQL result backend to set up). The
# workers serve no logs (--skip-serve-logs): on one machine the API server reads the task log
# files itself, and two log servers would need two ports under one host name.
# shellcheck shell=bash
# (Process titles: celery renames its main process "[celeryd: worker1@host:MainProcess] ...",
# which the pid_of pattern "worker<i>@" matches too; while it rewrites the title a pattern check
# can miss, so the start waits on the pid alone. Redis keeps its command line: --set-proc-title.)

REDIS_PORT=$((PORT_BASE + 379))
CELERY_WORKERS="${TRIDENT_CELERY_WORKERS:-2}"
CELERY_CONCURRENCY="${TRIDENT_CELERY_CONCURRENCY:-2}"

celery_settings() {
    echo "export AIRFLOW__CORE__EXECUTOR=CeleryExecutor"
    echo "export AIRFLOW__CELERY__BROKER_URL=redis://127.0.0.1:$REDIS_PORT/0"
    echo "export AIRFLOW__CELERY__RESULT_BACKEND=redis://127.0.0.1:$REDIS_PORT/1"
    echo "export AIRFLOW__CELERY__WORKER_CONCURRENCY=$CELERY_CONCURRENCY"
}

start_redis() {
    local pid
    command -v redis-server >/dev/null || die "no redis-server: run 'bash scripts/bootstrap.sh redis'"
    if pid="$(pid_of redis redis-server)"; then
        log "redis: already running (pid $pid) on 127.0.0.1:$REDIS_PORT"
        return 0
    fi
    port_busy "$REDIS_PORT" && die "port $REDIS_PORT is taken by another process (set TRIDENT_CLUSTER_PORT_BASE)"
    mkdir -p "$CLUSTER_DIR/redis"
    : >"$LOGS/redis.log"
    launch redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
        --dir "$CLUSTER_DIR/redis" --set-proc-title no
    wait_for redis redis redis-server log_has redis "Ready to accept connections"
    log "redis: started (pid $(cat "$PIDS/redis.pid")) on 127.0.0.1:$REDIS_PORT"
}
stop_redis() { stop_group redis redis-server redis; }
status_redis() { status_line redis redis-server redis "redis://127.0.0.1:$REDIS_PORT"; }
env_redis() { :; }

alive() { kill -0 "$(cat "$PIDS/$1.pid" 2>/dev/null)" 2>/dev/null; }
celery_ready() { # <i>: the worker's log says ready, or it died (then fail with its log's tail)
    local name="celery-worker$1"
    log_has "$name" " ready." && return 0
    alive "$name" && return 1
    tail -n 20 "$LOGS/$name.log" >&2 || true
    die "celery worker $1 exited; log $LOGS/$name.log"
}

start_celery() {
    local i name pid deadline
    eval "$(celery_settings)"
    for i in $(seq 1 "$CELERY_WORKERS"); do
        name="celery-worker$i"
        if pid="$(pid_of "$name" "worker$i@")"; then
            log "celery worker $i: already running (pid $pid)"
            continue
        fi
        : >"$LOGS/$name.log"
        launch "$name" "$VENV/bin/airflow" celery worker --celery-hostname "worker$i@%h" \
            --concurrency "$CELERY_CONCURRENCY" --pid "$PIDS/$name.airflow.pid" --skip-serve-logs
    done
    for i in $(seq 1 "$CELERY_WORKERS"); do
        name="celery-worker$i"
        deadline=$((SECONDS + READY_TIMEOUT_S))
        until celery_ready "$i"; do
            [ $SECONDS -lt $deadline ] || die "celery worker $i not ready after ${READY_TIMEOUT_S}s; log $LOGS/$name.log"
            sleep 0.5
        done
        log "celery worker $i: ready (pid $(cat "$PIDS/$name.pid")), AIRFLOW_HOME=${AIRFLOW_HOME:-~/airflow}"
    done
}
stop_celery() {
    local i
    for i in $(seq "$CELERY_WORKERS" -1 1); do
        stop_group "celery-worker$i" "worker$i@" "celery worker $i"
        rm -f "$PIDS/celery-worker$i.airflow.pid"
    done
}
status_celery() {
    local i rc=0
    for i in $(seq 1 "$CELERY_WORKERS"); do
        status_line "celery-worker$i" "worker$i@" "celery worker $i" "node worker$i@$(hostname)" || rc=1
    done
    return $rc
}
env_celery() { celery_settings; }

# Opt-in; `stop` and `status` also see a Celery part started earlier without the variable.
if [ "${TRIDENT_CLUSTER_CELERY:-0}" = 1 ] || [ -f "$PIDS/redis.pid" ]; then
    COMPONENTS+=(redis celery)
fi
