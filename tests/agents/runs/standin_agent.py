#!/usr/bin/env python3
"""A stand-in agent for measuring what a hop costs: reads its MCP config the way Claude Code does
(`--mcp-config FILE`, the `mcpServers` shape), starts server S from it (command, args, env),
initializes, sends N sequential `tools/list` requests (one in flight at a time), closes the
server's stdin and waits for it to exit.

    standin_agent.py --mcp-config FILE [-n 2000]

Prints one JSON line on stdout: {"n", "ok", "p50_us", "p90_us", "p99_us", "mean_us",
"total_s"}; "ok" counts the answers that were a result listing tools with the request's id.
Exits 1 if any answer was not.
"""
import json
import os
import subprocess
import sys
import time


def arg(name, default=None):
    if name in sys.argv:
        return sys.argv[sys.argv.index(name) + 1]
    return default


cfg = json.load(open(arg("--mcp-config")))
s = cfg["mcpServers"]["S"]
n = int(arg("-n", "2000"))
env = dict(os.environ, **(s.get("env") or {}))
p = subprocess.Popen([s["command"]] + list(s.get("args") or []), stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, env=env)


def rpc(i, method, params):
    p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": i, "method": method,
                               "params": params}) + "\n").encode())
    p.stdin.flush()
    while True:
        line = p.stdout.readline()
        if not line:
            raise SystemExit(f"the server closed its stdout at request {i}")
        msg = json.loads(line)
        if msg.get("id") == i and ("result" in msg or "error" in msg):
            return msg


rpc(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                      "clientInfo": {"name": "standin-agent", "version": "1"}})
p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
p.stdin.flush()
lat, ok = [], 0
t0 = time.perf_counter()
for i in range(1, n + 1):
    t = time.perf_counter()
    msg = rpc(i, "tools/list", {})
    lat.append(time.perf_counter() - t)
    if isinstance(msg.get("result", {}).get("tools"), list) and msg["result"]["tools"]:
        ok += 1
total = time.perf_counter() - t0
p.stdin.close()
p.wait()
lat.sort()


def pct(q):
    return round(lat[min(len(lat) - 1, int(len(lat) * q))] * 1e6, 1)


print(json.dumps({"n": n, "ok": ok, "p50_us": pct(0.5), "p90_us": pct(0.9), "p99_us": pct(0.99),
                  "mean_us": round(sum(lat) / len(lat) * 1e6, 1), "total_s": round(total, 3)}))
sys.exit(0 if ok == n else 1)
