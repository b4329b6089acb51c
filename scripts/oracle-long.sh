#!/usr/bin/env bash
# The long run of the Kafka Streams oracle (issue 29): tests/interop/test_oracle.py with many
# cases per family, one family after another (one pytest run, so one JVM, each), and a table
# of the counts: cases run, cases whose values agree, cases whose timestamps agree, wall time.
# Not part of `make test` (which runs 25 cases per family).
#
# Usage: scripts/oracle-long.sh [family...]        (default: all 18 families)
#   STREAMKIT_ORACLE_CASES   cases per family (default 10000)
#   STREAMKIT_ORACLE_SEED    the generator's seed (default 29)
#   STREAMKIT_ORACLE_BATCH   cases per streamkit app (default 50)
#   ORACLE_REPORT            where the per-family JSON lines go (default: a temporary file, shown)
#   ORACLE_PYTHON            the Python to run it with (default: .venv/bin/python)
# e.g. STREAMKIT_ORACLE_CASES=10000 scripts/oracle-long.sh tumbling session
# Needs java 17+ and mvn (the oracle is built by scripts/interop.sh) and the venv (make setup).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${ORACLE_PYTHON:-$ROOT/.venv/bin/python}"
TEST="tests/interop/test_oracle.py"
export STREAMKIT_ORACLE_CASES="${STREAMKIT_ORACLE_CASES:-10000}"
export STREAMKIT_ORACLE_SEED="${STREAMKIT_ORACLE_SEED:-29}"
if [ ! -x "$PY" ]; then
  echo "oracle-long: $PY is missing; run 'make setup' first (or set ORACLE_PYTHON)" >&2
  exit 2
fi
case "$STREAMKIT_ORACLE_CASES" in
  ''|*[!0-9]*) echo "oracle-long: STREAMKIT_ORACLE_CASES is a number of cases, not '$STREAMKIT_ORACLE_CASES'" >&2; exit 2 ;;
esac

cd "$ROOT"
all=()
while IFS= read -r family; do all+=("$family"); done < <(
  PYTHONPATH="$ROOT" "$PY" -c "from tests.interop.test_oracle import FAMILIES; print('\n'.join(p.id for p in FAMILIES))")
families=("$@")
[ ${#families[@]} -gt 0 ] || families=("${all[@]}")
for family in "${families[@]}"; do
  if ! printf '%s\n' "${all[@]}" | grep -qx -- "$family"; then
    echo "oracle-long: no family '$family'; the families: ${all[*]}" >&2
    exit 2
  fi
done

REPORT="${ORACLE_REPORT:-$(mktemp "${TMPDIR:-/tmp}/streamkit-oracle-long.XXXXXX")}"
export STREAMKIT_ORACLE_REPORT="$REPORT"
echo "oracle-long: ${#families[@]} families, $STREAMKIT_ORACLE_CASES cases each, seed $STREAMKIT_ORACLE_SEED; counts to $REPORT"
failed=0
for family in "${families[@]}"; do
  started=$(date +%s)
  # --timeout 0: a family's 10,000 cases take longer than the suite's 300 s per test.
  if ! PYTHONPATH="$ROOT" "$PY" -m pytest -q -p no:cacheprovider --timeout 0 \
      "$TEST::test_streamkit_answers_as_kafka_streams[$family]" \
      "$TEST::test_streamkit_stamps_as_kafka_streams[$family]"; then
    failed=1
  fi
  echo "{\"family\": \"$family\", \"wall_seconds\": $(( $(date +%s) - started ))}" >>"$REPORT"
done

"$PY" - "$REPORT" <<'EOF'
import json, sys
rows: dict[str, dict] = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    row = rows.setdefault(r["family"], {})
    if "aspect" in r:
        row.update(cases=r["cases"], seed=r["seed"], **{r["aspect"]: r["agreed"]})
    else:
        row["wall"] = r["wall_seconds"]
print(f"{'family':32} {'cases':>6} {'values agree':>13} {'timestamps agree':>17} {'wall s':>7}")
for family, r in rows.items():
    print(f"{family:32} {r.get('cases', '-'):>6} {r.get('values', '-'):>13} {r.get('timestamps', '-'):>17} {r.get('wall', '-'):>7}")
EOF
exit "$failed"
