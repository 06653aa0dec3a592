#!/usr/bin/env bash
# CI stage (issue 32): the compatibility corpus (docs/compatibility.md) on Python 3.11 and 3.13.
# Each interpreter gets a fresh virtualenv (--fresh): this work tree installed non-editable, the
# corpus's test requirements, and each package built from its pinned sdist. Every suite runs bare,
# under `tracer run` with the C accelerator and in pure Python (INVOSEQ_PURE=1); a test outcome
# that differs from the bare run fails the stage. Sdists and the wheels built from them are cached
# in $INVOSEQ_CORPUS_CACHE (default ~/.cache/invoseq-corpus), so only a first run downloads.
# Both interpreters run even when the first differs; the stage fails if either did.
# Measured on the 2-core machine: docs/compatibility.md, "In CI".
set -uo pipefail
cd "$(dirname "$0")/.."

# The newest installed CPython X.Y: pyenv's when pyenv has one, else pythonX.Y on PATH (as .ci/run).
interpreter() {
    local version=$1 newest
    if command -v pyenv >/dev/null 2>&1; then
        newest="$(pyenv versions --bare | grep -E "^${version//./\\.}\.[0-9]+$" | sort -V | tail -n 1)"
        if [ -n "$newest" ]; then
            echo "$(pyenv root)/versions/$newest/bin/python"
            return
        fi
    fi
    if command -v "python$version" >/dev/null 2>&1; then
        command -v "python$version"
        return
    fi
    echo "corpus: no Python $version here (pyenv install $version, or put python$version on PATH)" >&2
    return 1
}

py311="$(interpreter 3.11)" || exit 1
py313="$(interpreter 3.13)" || exit 1
cache="${INVOSEQ_CORPUS_CACHE:-$HOME/.cache/invoseq-corpus}"
status=0
for python in "$py311" "$py313"; do
    echo "corpus: $("$python" --version) ($python)"
    "$py311" -m benchmarks.suites --python "$python" --fresh --jobs 2 --cache "$cache" "$@" || status=1
    echo "corpus: $("$python" --version) done (${SECONDS} s so far)"
done
if [ "$status" -ne 0 ]; then
    echo "corpus: traced outcomes differ from bare ones (or a run failed): see above"
fi
exit "$status"
