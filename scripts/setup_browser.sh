#!/usr/bin/env bash
# Make sure Debian's Chromium is present for the real-browser test.
# Playwright cannot download its own browsers here, so we use /usr/bin/chromium.
set -u
if [ -x /usr/bin/chromium ]; then exit 0; fi
exec bash "$(dirname "$0")/apt_install.sh" setup_browser "the browser test" chromium
