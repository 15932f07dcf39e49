#!/usr/bin/env bash
# The demo: an embedded name server and a broker with 2 channels, 2 subscribers on each
# channel, and a publisher sending 10 events (2 partitions) to each channel. Every process
# is stopped at the end. Output: who processed what, the channel listing, and the broker's
# Prometheus metrics of the two channels (its HTTP monitor, serve --http).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/compile.sh ""
py=.venv/bin/python
out=$(mktemp -d)
# Every run starts from nothing: the publishers' sequences (ids pub-orders-1..10) and the
# token live in this run's own state dir, not in ~/.local/state where a previous run's stay.
export PUBSUB_STATE_DIR="$out/state"
ns_port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ns=(--ns-host 127.0.0.1 --ns-port "$ns_port")
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$out"; }
trap cleanup EXIT

wait_for() {  # wait_for FILE PATTERN: until a line matches, 20 s at most
  for _ in $(seq 200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "timed out waiting for '$2' in $1" >&2; cat "$1" >&2; exit 1
}

echo "== broker (embedded name server on 127.0.0.1:$ns_port) with channels orders, payments"
$py -m channel_server serve "${ns[@]}" --channel orders --channel payments --data-dir "$out/data" \
  --http 127.0.0.1:0 --log-level WARNING \
  >"$out/broker.log" 2>&1 & pids+=($!)
wait_for "$out/broker.log" "ready at"
head -1 "$out/broker.log"
http=$(grep -o 'http http://[^ ]*' "$out/broker.log" | head -1 | cut -d' ' -f2)

for ch in orders payments; do
  for s in 1 2; do
    $py -m subscriber run "${ns[@]}" --channel "$ch" --id "$ch-sub$s" --log-level WARNING \
      >"$out/$ch-sub$s.log" 2>&1 & pids+=($!)
  done
done
for ch in orders payments; do for s in 1 2; do wait_for "$out/$ch-sub$s.log" "ready"; done; done
echo "== 4 subscribers ready"

for ch in orders payments; do
  $py -m publisher publish "${ns[@]}" --channel "$ch" --id "pub-$ch" --count 10 --partitions 2 \
    --log-level WARNING
done

for ch in orders payments; do
  for _ in $(seq 200); do
    n=$(cat "$out/$ch-sub1.log" "$out/$ch-sub2.log" | grep -c "^\[" || true)
    [ "$n" -ge 10 ] && break; sleep 0.1
  done
done

echo "== who processed what"
for ch in orders payments; do
  for s in 1 2; do
    echo "-- $ch-sub$s:"
    grep "^\[" "$out/$ch-sub$s.log" | sed 's/^/   /' || echo "   (nothing)"
  done
done
echo "== channel listing"
$py -m channel_server list "${ns[@]}"
echo "== metrics: curl -H 'Authorization: Bearer <monitor token>' ${http}metrics (the channels' lines)"
curl -s -H "Authorization: Bearer $(cat "$PUBSUB_STATE_DIR/monitor-token")" "${http}metrics" \
  | grep -E '^pubsub_(channel_(accepted|acked)_events_total|group_backlog_events)'
