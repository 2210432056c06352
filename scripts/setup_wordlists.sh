#!/usr/bin/env bash
# Make sure Debian's word lists are in /usr/share/dict for the invented-words test and measurement
# (core/distill/invented.py): wbrazilian + wportuguese (Portuguese), wamerican + wbritish (English).
set -u
FILES=(/usr/share/dict/brazilian /usr/share/dict/portuguese /usr/share/dict/american-english /usr/share/dict/british-english)
missing=0
for f in "${FILES[@]}"; do [ -f "$f" ] || missing=1; done
if [ "$missing" = "0" ]; then exit 0; fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup_wordlists: apt-get not available; the real-word-list test will be skipped" >&2; exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "setup_wordlists: not root and no sudo; the real-word-list test will be skipped" >&2; exit 0; fi
fi
echo "setup_wordlists: installing Debian's word lists (wbrazilian wportuguese wamerican wbritish)" >&2
$SUDO apt-get update -qq >/dev/null 2>&1 || true
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wbrazilian wportuguese wamerican wbritish >/dev/null 2>&1 \
  || echo "setup_wordlists: could not install the word lists; the real-word-list test will be skipped" >&2
exit 0
