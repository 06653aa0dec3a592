#!/usr/bin/env bash
# Debian's chromium for the HTML report's browser tests (tests/cmr/report): installed when
# missing, quietly. Needs root (CI containers run as root); without it the browser tests skip, or
# fail where INVOSEQ_REQUIRE lists browser (as .ci/run does).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "chromium.sh: not root, chromium not installed: the browser tests will skip" \
        "(or fail, under INVOSEQ_REQUIRE=browser)" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends chromium >/dev/null
