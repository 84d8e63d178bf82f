#!/usr/bin/env python3
"""Records a stdio MCP session with agent-vcr's own recorder (agent_vcr.recorder.MCPRecorder).

Usage: agent_vcr_record.py OUT.vcr -- <server command> [args...]

Why not `agent-vcr record --transport stdio`: that command prints a banner on stdout (the MCP
wire) and reads the client with `sys.stdin.buffer.read(4096)`, which blocks until 4096 bytes
arrive, so a real client's `initialize` is never forwarded. agent-vcr's own `client_stdin_fd`
option (what its `--demo` uses) reads with `os.read`, which returns what is there: this script
passes fd 0 and otherwise runs agent-vcr's recorder, transport and writer unchanged. It stops
when the client closes stdin or sends SIGTERM (the Python SDK does either), and then agent-vcr
writes the .vcr file itself.
"""

import asyncio
import logging
import signal
import sys

from agent_vcr.recorder import MCPRecorder


async def main(out: str, command: list[str]) -> None:
    recorder = MCPRecorder(
        transport="stdio",
        server_command=command[0],
        server_args=command[1:],
        client_stdin_fd=0,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, recorder.request_stop)
    task = asyncio.create_task(recorder.record(out))
    # The transport's reader ends when the client closes stdin: that is the end of the session.
    while not task.done():
        reader = getattr(recorder._transport, "_reader_task", None)
        if reader is not None and reader.done():
            recorder.request_stop()
        await asyncio.sleep(0.05)
    await task


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    args = sys.argv[1:]
    if len(args) < 3 or args[1] != "--":
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    asyncio.run(main(args[0], args[2:]))
