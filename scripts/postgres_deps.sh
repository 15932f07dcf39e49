#!/usr/bin/env bash
# The database the PostgreSQL store and failover tests run against: Debian's postgresql
# server binaries, installed with apt when missing (as root, as in CI). The tests start
# their own throwaway cluster (initdb in a temp dir, a free port); apt's is not used.
exec "$(dirname "$0")/apt_deps.sh" postgresql "the PostgreSQL tests" initdb \
  '/usr/lib/postgresql/*/bin/initdb'
