#!/bin/sh
# marker_server.sh MARKER [--copy FILE] -- COMMAND [ARG...]
#
# Starts an MCP server (exec COMMAND ARG...), first appending one line to MARKER (its pid and
# working folder), so a test can count how many times the server was really started. With
# --copy FILE it also copies FILE to MARKER.copy at that moment (what a config file held while
# the agent was running). Run it as `sh marker_server.sh …` (no exec bit needed).
set -eu
marker=$1
shift
copy=
if [ "${1:-}" = --copy ]; then
  copy=$2
  shift 2
fi
[ "${1:-}" = -- ] && shift
echo "$$ $(pwd)" >>"$marker"
if [ -n "$copy" ]; then cp "$copy" "$marker.copy"; fi
exec "$@"
