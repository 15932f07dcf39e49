#!/usr/bin/env bash
# The browser the page tests drive: Debian's chromium, installed with apt when missing
# (as root, as in CI). Playwright (the `browser` extra) drives it with executable_path; it
# never downloads a browser of its own.
exec "$(dirname "$0")/apt_deps.sh" chromium "the browser tests" chromium
