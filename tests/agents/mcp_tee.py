#!/usr/bin/env python3
"""Transparent stdio MCP wrapper that logs every JSON-RPC line both ways (standard library only).

    mcp_tee.py LOGFILE -- SERVER_COMMAND [ARGS...]

Spawns the server, copies the client's stdin to it and its stdout to the client byte for byte,
and appends {"dir": "c2s"|"s2c", "t": seconds, "msg": <parsed line>} per line to LOGFILE.
The server's stderr passes through. Exits with the server's exit code.
"""

import json
import subprocess
import sys
import threading
import time


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    log = open(sys.argv[1], "a", encoding="utf-8")
    lock = threading.Lock()
    t0 = time.monotonic()
    proc = subprocess.Popen(sys.argv[3:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def record(direction, line):
        try:
            msg = json.loads(line)
        except ValueError:
            msg = line.decode("utf-8", "replace")
        with lock:
            log.write(json.dumps({"dir": direction, "t": round(time.monotonic() - t0, 3),
                                  "msg": msg}) + "\n")
            log.flush()

    def pump(src, dst, direction, close_dst):
        for line in iter(src.readline, b""):
            record(direction, line)
            try:
                dst.write(line)
                dst.flush()
            except (BrokenPipeError, ValueError):
                break
        if close_dst:
            try:
                dst.close()
            except OSError:
                pass

    up = threading.Thread(target=pump, args=(sys.stdin.buffer, proc.stdin, "c2s", True),
                          daemon=True)
    up.start()
    pump(proc.stdout, sys.stdout.buffer, "s2c", False)
    sys.exit(proc.wait())


if __name__ == "__main__":
    main()
