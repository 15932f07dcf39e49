#!/usr/bin/env bash
# The database the PostgreSQL store and failover tests run against: Debian's postgresql
# server binaries, installed with apt when missing (as root, as in CI). Quick when they are
# there. The tests start their own throwaway cluster (initdb in a temp dir, a free port);
# apt's own cluster is not used.
set -euo pipefail
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "warning: PostgreSQL is missing and this is not root: the PostgreSQL tests will fail;" \
    "install it with: sudo apt-get install postgresql" >&2
  exit 0
fi
echo "installing postgresql (apt) for the store and failover tests"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq postgresql >/dev/null
