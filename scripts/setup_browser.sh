#!/usr/bin/env bash
# Make sure Debian's Chromium is present for the real-browser test.
# Playwright cannot download its own browsers here, so we use /usr/bin/chromium.
set -u
if [ -x /usr/bin/chromium ]; then exit 0; fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup_browser: apt-get not available; the browser test will be skipped" >&2; exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "setup_browser: not root and no sudo; the browser test will be skipped" >&2; exit 0; fi
fi
echo "setup_browser: installing Debian's chromium (for the end-to-end test)" >&2
$SUDO apt-get update -qq >/dev/null 2>&1 || true
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 \
  || echo "setup_browser: could not install chromium; the browser test will be skipped" >&2
exit 0
