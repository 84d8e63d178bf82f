#!/usr/bin/env python3
"""Runs localab-vcr's model proxy (agent_vcr.model_proxy.ModelProxy, recording) on its own.

Usage: localab_model_proxy.py TAPE UPSTREAM_URL

localab-vcr starts its model proxy only inside `agent-vcr record -- <agent>`, pointed at the
agent through ANTHROPIC_BASE_URL; the benchmark needs the proxy without an agent. This starts
the same ModelProxy class, on the same Tape class, the way its `cmd_record` does (127.0.0.1, a
free port, mode "record", the upstream as both its Anthropic and OpenAI base URL), prints its
base URL as the first stdout line, and stops it and closes the tape when stdin closes. Its
request threads are made non-daemon so that stopping waits for each to finish writing its answer
to the tape (it tapes an answer after forwarding the whole of it; found when a 100,000-event
answer was not on the tape yet when the bench stopped the proxy).
"""

import sys

from agent_vcr.model_proxy import ModelProxy
from agent_vcr.tape import Tape


def main(tape_path: str, upstream: str) -> int:
    tape = Tape(tape_path, "record")
    proxy = ModelProxy("127.0.0.1", 0, tape, {"anthropic": upstream, "openai": upstream}, "record")
    proxy.start()
    proxy._srv.daemon_threads = False  # server_close() then joins the request threads
    print(proxy.base_url(), flush=True)
    sys.stdin.read()
    proxy.stop()
    tape.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
