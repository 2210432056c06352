#!/usr/bin/env bash
# Make sure Debian's word lists are in /usr/share/dict for the invented-words test and measurement
# (core/distill/invented.py): wbrazilian + wportuguese (Portuguese), wamerican + wbritish (English).
set -u
for f in /usr/share/dict/brazilian /usr/share/dict/portuguese /usr/share/dict/american-english \
  /usr/share/dict/british-english; do
  [ -f "$f" ] || exec bash "$(dirname "$0")/apt_install.sh" setup_wordlists "the real-word-list test" \
    wbrazilian wportuguese wamerican wbritish
done
exit 0
