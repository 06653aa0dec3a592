#!/usr/bin/env bash
# Debian's redis-server for the task-queue tests (tests/queues: Celery's broker and result
# backend, RQ's queue): installed when missing, quietly. Each test starts its own server on
# 127.0.0.1 on a free port and stops it; nothing is started here. Needs root (CI containers run
# as root); without it the queue tests skip, or fail where INVOSEQ_REQUIRE lists redis (as
# .ci/run does).
set -euo pipefail
# The administration tools (runuser, service) live in sbin, which a minimal PATH leaves out.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
if command -v redis-server >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "redis.sh: not root, redis-server not installed: the queue tests will skip" \
        "(or fail, under INVOSEQ_REQUIRE=redis)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends redis-server >/dev/null
# The package's own service is not wanted: the tests start servers of their own.
if command -v service >/dev/null 2>&1; then
    service redis-server stop >/dev/null 2>&1 || true
fi
