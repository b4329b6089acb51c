#!/usr/bin/env bash
# Builds the Java modules under interop/ (Kafka Streams as streamkit's oracle and peer) with
# Maven: each module's jar and its runtime dependencies, fetched from Maven Central, land in
# .cache/interop/<module>/lib/ (STREAMKIT_INTEROP_CACHE overrides the directory). A module is
# rebuilt only when its pom or sources changed since the last build (a stamp of their hash).
# Usage: scripts/interop.sh [module...]   (default: every module)   Needs java 17+ and mvn.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${STREAMKIT_INTEROP_CACHE:-$ROOT/.cache/interop}"
for tool in java mvn; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "interop: '$tool' is not installed (Java 17+ and Maven build the Kafka Streams oracle)" >&2
    exit 2
  fi
done
modules=("$@")
if [ ${#modules[@]} -eq 0 ]; then
  for pom in "$ROOT"/interop/*/pom.xml; do modules+=("$(basename "$(dirname "$pom")")"); done
fi
for module in "${modules[@]}"; do
  src="$ROOT/interop/$module"
  [ -f "$src/pom.xml" ] || { echo "interop: no module '$module' (no $src/pom.xml)" >&2; exit 2; }
  out="$CACHE/$module"
  stamp="$( (cd "$src" && find pom.xml src -type f | LC_ALL=C sort | xargs sha256sum) | sha256sum | cut -d' ' -f1)"
  if [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$stamp" ] && ls "$out"/lib/*.jar >/dev/null 2>&1; then
    continue
  fi
  rm -rf "$out"
  mkdir -p "$out/lib"
  log="$(mktemp)"
  if ! mvn -B -q -f "$src/pom.xml" package dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$out/lib" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "interop: building $module failed (log above)" >&2
    exit 1
  fi
  rm -f "$log"
  cp "$src"/target/*.jar "$out/lib/"
  echo "$stamp" >"$out/stamp"
done
