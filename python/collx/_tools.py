"""The command-line tools of a pip-installed collx: collx-run, collx-info and collx-trace.

pip puts these entry points on PATH (pyproject.toml's [project.scripts]); each becomes the
executable the wheel ships in collx/bin, which finds collx's libraries in collx/lib through
its RPATH. (A wheel's own scripts directory would need an RPATH from the interpreter's bin
directory to site-packages, which differs between a venv, --user and a system install.) Only
a wheel installs this file: a CMake install puts the tools in <prefix>/bin itself.
"""

import os
import sys


def _become(tool):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", tool)
    if not os.access(path, os.X_OK):
        sys.exit("%s: %s is missing or not executable: this collx package was installed "
                 "without its tools; reinstall it (pip install --no-build-isolation .)"
                 % (tool, path))
    # exec, not a child process: the tool keeps this process's id, so signals sent to it
    # (collx-run forwards them to its ranks) and its exit status are the tool's own.
    os.execv(path, [tool] + sys.argv[1:])


def collx_run():
    _become("collx-run")


def collx_info():
    _become("collx-info")


def collx_trace():
    _become("collx-trace")
