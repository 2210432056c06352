#!/usr/bin/env bash
# apt_install.sh WHO WHAT-SKIPS PACKAGE...: install Debian packages when apt-get (as root or with sudo) can;
# otherwise say which tests will be skipped and succeed anyway (the tests skip with a visible reason).
set -u
who=$1; skips=$2; shift 2
if ! command -v apt-get >/dev/null 2>&1; then
  echo "$who: apt-get not available; $skips will be skipped" >&2; exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "$who: not root and no sudo; $skips will be skipped" >&2; exit 0; fi
fi
echo "$who: installing Debian's $*" >&2
$SUDO apt-get update -qq >/dev/null 2>&1 || true
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 \
  || echo "$who: could not install $*; $skips will be skipped" >&2
exit 0
