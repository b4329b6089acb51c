#!/usr/bin/env bash
# The README's demo (`make demo`): a streaming pipeline (apps/pageviews.py) run by a worker on
# the embedded log, then the log itself driven from the command line. Everything happens in a
# fresh temporary data directory that is removed on exit; nothing outside it is touched.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DEMO_VENV:-$ROOT/.venv}"   # the test of the demo names the venv it runs in
STREAMKIT="$VENV/bin/streamkit"
if [ ! -x "$STREAMKIT" ]; then
  echo "demo: $STREAMKIT is missing; run 'make setup' first" >&2
  exit 1
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/streamkit-demo.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export STREAMKIT_DATA_DIR="$WORK/data"   # every command below uses this data directory

if [ -t 1 ]; then BOLD=$'\033[1m'; DIM=$'\033[2m'; RESET=$'\033[0m'; else BOLD=""; DIM=""; RESET=""; fi

section() { printf '\n%s== %s ==%s\n' "$BOLD" "$*" "$RESET"; }
# Show a command, then run it (as `streamkit`, the name users type).
run() { printf '%s$ streamkit %s%s\n' "$DIM" "$*" "$RESET"; "$STREAMKIT" "$@"; }

section "1. A streaming pipeline: apps/pageviews.py drops bots and re-keys page views by user"
printf '%s$ python -m apps.pageviews --records 20000%s\n' "$DIM" "$RESET"
(cd "$ROOT" && "$VENV/bin/python" -m apps.pageviews --records 20000 --data-dir "$STREAMKIT_DATA_DIR")
(cd "$ROOT" && run agents -A apps.pageviews:app)

section "2. What the pipeline wrote: visits keyed by user, one user per partition"
run topics describe visits
run consume visits --from-beginning --max 5 --print-offsets --print-keys

section "3. The log by hand: create a topic with 3 partitions"
run topics create orders --partitions 3 --config retention.ms=604800000
run topics list

section "4. Produce keyed lines: KEY:VALUE, partitioned by Kafka's murmur2 of the key"
orders='alice:book
bob:pen
carol:lamp
alice:chair
dave:desk
bob:ink
erin:mug
alice:shelf
carol:rug'
printf '%s$ printf ... | streamkit produce orders --key-separator :%s\n' "$DIM" "$RESET"
printf '%s\n' "$orders" | "$STREAMKIT" produce orders --key-separator :

section "5. Describe the topic: offsets, sizes and segments per partition"
run topics describe orders

section "6. Consume from the beginning: PARTITION:OFFSET, key, value (a key stays in one partition)"
run consume orders --from-beginning --print-offsets --print-keys

section "7. A consumer group commits its offsets and resumes where it stopped"
run consume orders --group billing --from-beginning --max 4 --print-offsets
printf '%s$ printf ... | streamkit produce orders --key-separator :%s\n' "$DIM" "$RESET"
printf 'frank:lamp\nalice:vase\n' | "$STREAMKIT" produce orders --key-separator :
echo "-- the same group again: the 5 records it had not read plus the 2 new ones, then nothing"
run consume orders --group billing --print-offsets
run consume orders --group billing --print-offsets

section "8. Dump a segment file, like kafka-dump-log"
segment=""
for f in "$STREAMKIT_DATA_DIR"/orders-*/*.log; do
  if [ -s "$f" ]; then segment="$f"; break; fi
done
[ -n "$segment" ]
run log dump --records "$segment"

section "9. Verify every segment and index of the data directory"
run log verify "$STREAMKIT_DATA_DIR"

section "10. Verify finds damage: one flipped byte in a copy of the directory"
cp -R "$STREAMKIT_DATA_DIR" "$WORK/damaged"
damaged="$WORK/damaged/${segment#"$STREAMKIT_DATA_DIR"/}"
# Flip the last byte of the segment: inside the last batch's records, covered by its CRC.
last=$(( $(wc -c < "$damaged") - 1 ))
printf '\x5a' | dd of="$damaged" bs=1 seek="$last" conv=notrunc status=none
if run log verify "$WORK/damaged"; then
  echo "demo: verify missed the damage" >&2
  exit 1
fi
echo "-- exit code 1: damage found, as expected"

section "11. A table: apps/wordcount.py counts words into RocksDB, queried live and after the worker stops"
export PYTHONPATH="$ROOT" STREAMKIT_BROKER="file://$WORK/wordcount"
STATE="$WORK/state"
printf '%s$ streamkit worker -A apps.wordcount:app --web-port 0 --state-dir %s &%s\n' "$DIM" "$STATE" "$RESET"
"$STREAMKIT" worker -A apps.wordcount:app --web-port 0 --state-dir "$STATE" --progress-interval 0 \
  2> "$WORK/worker.log" &
worker_pid=$!
for _ in $(seq 1 300); do [ -f "$STATE/.web" ] && break; sleep 0.1; done
[ -f "$STATE/.web" ] || { cat "$WORK/worker.log" >&2; exit 1; }
run send -A apps.wordcount:app lines "the quick brown fox jumps over the lazy dog"
run send -A apps.wordcount:app lines "the end"
echo "-- the worker counts, then commits the table (changelog first, then RocksDB) every second"
for _ in $(seq 1 100); do
  found=$("$STREAMKIT" tables get -A apps.wordcount:app word_counts the --state-dir "$STATE" 2>/dev/null || true)
  [ "$found" = '{"key": "the", "value": 3}' ] && break
  sleep 0.1
done
run tables get -A apps.wordcount:app word_counts the --state-dir "$STATE"
run tables scan -A apps.wordcount:app word_counts --prefix l --state-dir "$STATE"
kill -TERM "$worker_pid"
wait "$worker_pid"
echo "-- the worker stopped; the state directory still answers (read-only, as of its last commit)"
run tables get -A apps.wordcount:app word_counts fox --state-dir "$STATE"

section "Done"
echo "The temporary data directory is removed now."
