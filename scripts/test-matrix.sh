#!/usr/bin/env bash
# `make test-matrix`: the test suite on each other supported Python, in a venv of its own
# (.venv-X.Y) with `pip install -e '.[dev]'` and no extra, so it is also the run without the
# spark extra. Spark tests skip there (no pyspark) and are deselected by their marker; the
# Faust examples are left out (they need faust-streaming's own venv, tests/support/plugin.py);
# so are the tests that need a Java process of Kafka's (marker jvm: Apache Kafka, its tools,
# Kafka Streams): Kafka answers the same whatever Python its client runs on, and the same
# Python clients run there against `streamkit broker`.
# `make test` runs everything on the default Python.
#
#   scripts/test-matrix.sh [VERSION...]       default: 3.12 3.13
#   PYTEST_ARGS='tests/runtime/eos' scripts/...       only some tests (word-split, like make variables)
#
# Each Python comes from the machine: pythonX.Y on PATH, or pyenv's build of X.Y.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "$#" -eq 0 ]; then set -- 3.12 3.13; fi

# The interpreter for version $1 that really runs (a pyenv shim on PATH may not), or nothing.
find_python() {
  local version=$1 candidate
  local candidates=("python$version")
  if command -v pyenv > /dev/null 2>&1; then
    candidates+=("$(pyenv root)/versions/$version".*/bin/"python$version")
  fi
  for candidate in "${candidates[@]}"; do
    if "$candidate" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$version'.split('.'))))" \
        > /dev/null 2>&1; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}

# Every Python is found before any suite starts: a missing one fails in one line, at once.
declare -A pythons
for version in "$@"; do
  pythons[$version]=$(find_python "$version") || {
    echo "test-matrix: no Python $version on this machine (python$version on PATH or pyenv install $version)" >&2
    exit 1
  }
done

cd "$ROOT"
for version in "$@"; do
  venv=".venv-$version"
  if [ ! -f "$venv/.installed" ] || [ pyproject.toml -nt "$venv/.installed" ]; then
    [ -x "$venv/bin/python" ] || "${pythons[$version]}" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[dev]'
    touch "$venv/.installed"
  fi
  echo "== Python $version ($("$venv/bin/python" -c 'import platform; print(platform.python_version())')): pytest -m 'not spark and not jvm' --ignore tests/faust ${PYTEST_ARGS:-}"
  started=$SECONDS
  # shellcheck disable=SC2086  # PYTEST_ARGS is a list of words
  "$venv/bin/python" -m pytest -q -p no:cacheprovider -m 'not spark and not jvm' --ignore tests/faust ${PYTEST_ARGS:-}
  echo "== Python $version: passed in $((SECONDS - started)) s"
done
