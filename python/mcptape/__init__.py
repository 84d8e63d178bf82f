"""mcptape: a tape recorder for the Model Context Protocol.

The wheel carries the ``mcptape`` binary (on PATH once installed) and a pytest plugin
(:mod:`mcptape.pytest_plugin`). :func:`binary` finds the binary.
"""

import os
import shutil
import sys

__all__ = ["binary"]


def binary() -> str:
    """The mcptape binary: $MCPTAPE_BIN, else the one installed beside this Python, else PATH's."""
    env = os.environ.get("MCPTAPE_BIN")
    if env:
        return env
    beside = os.path.join(os.path.dirname(sys.executable), "mcptape")
    if os.path.exists(beside):
        return beside
    found = shutil.which("mcptape")
    if not found:
        raise FileNotFoundError("the mcptape binary is not installed (pip install mcptape)")
    return found
