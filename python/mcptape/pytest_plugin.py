"""pytest plugin: the MCP servers of a test, recorded once and played from the tape after that.

    def test_weather(mcptape):
        command = mcptape.server(["python", "weather_server.py"])
        params = StdioServerParameters(command=command[0], args=command[1:])
        ...                                   # the test's MCP client spawns `command`

``mcptape.server(cmd)`` gives the command line that the test's client spawns in place of the
server's: ``mcptape record`` or ``mcptape play``, by mode. The tape is named after the test
(``tests/tapes/<module>/<test>.jsonl`` under pytest's rootdir; ``--mcptape-dir`` names another
folder, ``name=`` another tape). When play answered a request that is not on the tape with a
miss, the test fails, with mcptape's explanation in the failure message.

Modes (``--mcptape-mode``): ``once`` (the default) records when the tape is missing and plays
it when present; ``all`` always records (the old tape is kept as ``TAPE.bak``); ``none`` only
plays, and a missing tape fails the test; ``new`` plays and sends what is not on the tape to the
live server, appending it (``mcptape play --on-miss live``). With ``CI`` set, the default is
``none``: CI never records by accident.
"""

import os
import re
import shlex
import time

import pytest

from . import binary

MODES = ("once", "new", "all", "none")


def pytest_addoption(parser):
    group = parser.getgroup("mcptape", "MCP servers from tapes (mcptape)")
    group.addoption(
        "--mcptape-mode",
        choices=MODES,
        default=None,
        help="once: record when the tape is missing, else play (default; 'none' when CI is set); "
        "new: play, live on a miss; all: always record; none: only play",
    )
    group.addoption(
        "--mcptape-dir",
        default=None,
        help="where the tapes are (default: tests/tapes under the rootdir)",
    )


def _mode(config):
    asked = config.getoption("--mcptape-mode")
    if asked:
        return asked
    return "none" if os.environ.get("CI") else "once"


def _tape_name(node) -> str:
    module = os.path.splitext(os.path.basename(str(node.path)))[0]
    test = re.sub(r"[^A-Za-z0-9_.-]+", "-", node.name).strip("-")
    return os.path.join(module, test + ".jsonl")


class Tapes:
    """The tapes of one test: the command lines to spawn, and what each run of mcptape said."""

    def __init__(self, request):
        config = request.config
        self.mode = _mode(config)
        folder = config.getoption("--mcptape-dir") or os.path.join(str(config.rootpath), "tests", "tapes")
        self.dir = folder
        self.default_name = _tape_name(request.node)
        self.runs = []  # (tape, verb, log file, rc file)
        self._tmp = request.getfixturevalue("tmp_path")

    def path(self, name=None) -> str:
        """The tape's path (``name``: a file name under the tape folder, or a path)."""
        name = name or self.default_name
        return name if os.path.isabs(name) else os.path.join(self.dir, name)

    def server(self, command, name=None):
        """The command line to spawn instead of ``command`` (a list): record or play, by mode."""
        tape = self.path(name)
        exists = os.path.exists(tape)
        if self.mode == "all" or (self.mode == "once" and not exists):
            os.makedirs(os.path.dirname(tape), exist_ok=True)
            verb, argv = "record", [binary(), "record", "--tape", tape, "--", *command]
        elif self.mode == "new":
            verb, argv = "play", [binary(), "play", tape, "--on-miss", "live", "--", *command]
        else:
            if not exists:
                pytest.fail(
                    f"mcptape: no tape {tape} to play (mode {self.mode}); record it with "
                    "--mcptape-mode once (or all)",
                    pytrace=False,
                )
            verb, argv = "play", [binary(), "play", tape]
        n = len(self.runs)
        log, rc = self._tmp / f"mcptape-{n}.log", self._tmp / f"mcptape-{n}.rc"
        self.runs.append((tape, verb, log, rc))
        # Behind /bin/sh, which keeps mcptape's stderr and exit status for the check after the
        # test: the client that spawns it sees neither.
        script = '"$@" 2>>"$MCPTAPE_LOG"; echo $? >"$MCPTAPE_RC"'
        return [
            "/usr/bin/env",
            f"MCPTAPE_LOG={log}",
            f"MCPTAPE_RC={rc}",
            "/bin/sh",
            "-c",
            script,
            "mcptape",
            *argv,
        ]

    def problems(self):
        """What mcptape said went wrong: a miss (play's exit 1), or any other failure."""
        problems = []
        for tape, verb, log, rc in self.runs:
            deadline = time.monotonic() + 10
            while not rc.exists() and time.monotonic() < deadline and log.exists():
                time.sleep(0.05)
            if not rc.exists():
                continue  # never started, or still running: nothing said yet
            status = rc.read_text().strip()
            said = log.read_text() if log.exists() else ""
            if status == "0":
                continue
            what = "missed the tape" if (verb == "play" and status == "1") else f"exited {status}"
            problems.append(f"mcptape {verb} {shlex.quote(tape)} {what}:\n{said.strip()}")
        return problems


@pytest.fixture
def mcptape(request):
    """MCP servers from tapes for this test (see the module's doc)."""
    return Tapes(request)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    # Checked as part of the test's own call, so a miss is a failing test (not an error in
    # teardown), reported with mcptape's explanation.
    tapes = getattr(item, "funcargs", {}).get("mcptape")
    failed = None
    try:
        result = yield
    except BaseException as e:  # the test failed on its own: often the client got play's error
        failed = e
    problems = tapes.problems() if isinstance(tapes, Tapes) else []
    if problems:
        said = "\n\n".join(problems)
        if failed is not None:
            said += f"\n\n(the test itself failed with {type(failed).__name__}: {failed})"
        pytest.fail(said, pytrace=False)
    if failed is not None:
        raise failed
    return result
