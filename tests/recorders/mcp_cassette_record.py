#!/usr/bin/env python3
"""Records a stdio MCP session with mcp-cassette's own recorder and writer, on Python 3.11.

Usage: mcp_cassette_record.py [--no-default-redactions] OUT.json -- <server command> [args...]

mcp-cassette requires Python >= 3.12 and does not run on 3.11: its `session/claim.py` uses the
PEP 695 generic syntax (`def _despite_sharing[T](...)`), a SyntaxError before 3.12, and both
its package `__init__` and its stdio proxy (`record/proxy.py`) import that module. Its recorder
(`record/recorder.py`: SessionRecorder, which classifies, numbers, times and redacts each wire
line) and its writer (`cassette.py`: Cassette.save) do not, so this script loads those two
without the package `__init__`, relays stdio between the client and the server line by line
(the part of mcp-cassette's proxy that cannot be imported), hands every line to
SessionRecorder.on_line exactly as its proxy's pumps do, and at the end saves the cassette
with mcp-cassette's own code. Redaction is built as `mcp-cassette record` builds it
(`build_redactor`: its default rules and PII packs, or none with `--no-default-redactions`,
the same flag as theirs).
"""

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import types


def load_writer(defaults: bool):
    spec = importlib.util.find_spec("mcp_cassette")
    root = spec.submodule_search_locations[0]
    # Stand-in packages: their __init__ files import the 3.12-only module.
    for name, sub in (("mcp_cassette", ""), ("mcp_cassette.record", "/record")):
        pkg = types.ModuleType(name)
        pkg.__path__ = [root + sub]
        sys.modules[name] = pkg
    from mcp_cassette.record.recorder import SessionRecorder
    from mcp_cassette.redaction.redactor import build_redactor

    return SessionRecorder(redactor=build_redactor(include_defaults=defaults))


def main(out: str, command: list[str], defaults: bool) -> int:
    recorder = load_writer(defaults)
    lock = threading.Lock()  # the two pumps are threads here, not anyio tasks
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def tap(sender: str, line: bytes) -> None:
        with lock:
            recorder.on_line(sender, line)

    def server_to_client() -> None:
        for line in server.stdout:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
            tap("server", line)

    saved = threading.Event()

    def save() -> None:
        with lock:
            if not saved.is_set():
                recorder.build().save(out)
                saved.set()

    def on_term(signum, frame) -> None:
        save()
        server.terminate()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    pump = threading.Thread(target=server_to_client, daemon=True)
    pump.start()
    for line in sys.stdin.buffer:
        tap("client", line)
        try:
            server.stdin.write(line)
            server.stdin.flush()
        except BrokenPipeError:
            break
    try:
        server.stdin.close()
    except BrokenPipeError:
        pass
    # The client closed its side: the session is over. Save now, before the client's SDK, which
    # waits only briefly for its server to exit, sends SIGTERM.
    pump.join(timeout=1.0)
    save()
    return server.wait()


if __name__ == "__main__":
    args = sys.argv[1:]
    defaults = True
    if args[:1] == ["--no-default-redactions"]:
        defaults = False
        args = args[1:]
    if len(args) < 3 or args[1] != "--":
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(args[0], args[2:], defaults))
