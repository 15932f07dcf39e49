#!/usr/bin/env bash
# The browser the page tests drive: Debian's chromium, installed with apt when missing
# (as root, as in CI). Quick when it is there. Playwright (the `browser` extra) drives it
# with executable_path; it never downloads a browser of its own.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "warning: chromium is missing and this is not root: the browser tests will skip" \
    "(and fail in CI); install it with: sudo apt-get install chromium" >&2
  exit 0
fi
echo "installing chromium (apt) for the browser tests"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
