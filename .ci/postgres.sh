#!/usr/bin/env bash
# A PostgreSQL server for the PostgreSQL store's tests: installed from the Debian packages when
# missing, listening on 127.0.0.1:5432 only, with a role and a database named invoseq (password
# invoseq). Idempotent: run it as often as you like; it prints nothing unless something fails.
#   .ci/postgres.sh && export INVOSEQ_TEST_PG=postgresql://invoseq:invoseq@127.0.0.1:5432/invoseq
set -euo pipefail
# The administration tools (runuser, pg_ctlcluster's helpers) live in sbin, which a minimal PATH
# (an env -i shell, some CI runners) leaves out.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

role=invoseq
password=invoseq
database=invoseq
port=5432

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

as_postgres() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else sudo -u postgres "$@"; fi
}

if ! command -v pg_ctlcluster >/dev/null || [ -z "$(ls /usr/lib/postgresql 2>/dev/null)" ]; then
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi

version="$(ls /usr/lib/postgresql | sort -V | tail -n 1)"
if ! pg_lsclusters -h | awk '{print $1, $2}' | grep -qx "$version main"; then
    as_root pg_createcluster "$version" main >/dev/null
fi

# Loopback only: the tests need nothing else, and nothing else should reach a test server.
conf="/etc/postgresql/$version/main/conf.d/invoseq.conf"
wanted="listen_addresses = '127.0.0.1'
port = $port"
changed=0
if [ "$(as_root cat "$conf" 2>/dev/null || true)" != "$wanted" ]; then
    printf '%s\n' "$wanted" | as_root tee "$conf" >/dev/null
    changed=1
fi

status="$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $4}')"
if [ "$status" != "online" ]; then
    as_root pg_ctlcluster "$version" main start
elif [ "$changed" -eq 1 ]; then
    as_root pg_ctlcluster "$version" main restart
fi

for _ in $(seq 1 60); do
    if pg_isready -q -h 127.0.0.1 -p "$port"; then break; fi
    sleep 0.5
done
pg_isready -q -h 127.0.0.1 -p "$port" || { echo "postgres.sh: server not ready" >&2; exit 1; }

psql_admin() {
    as_postgres psql -X -q -v ON_ERROR_STOP=1 -p "$port" "$@"
}

if [ "$(psql_admin -tAc "SELECT 1 FROM pg_roles WHERE rolname = '$role'")" != "1" ]; then
    psql_admin -c "CREATE ROLE $role LOGIN PASSWORD '$password'"
fi
if [ "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = '$database'")" != "1" ]; then
    psql_admin -c "CREATE DATABASE $database OWNER $role"
fi
