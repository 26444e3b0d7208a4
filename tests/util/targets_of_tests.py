#!/usr/bin/env python3
"""Prints the build outputs that the ctest tests a selection names need, as targets for the
build tool (paths relative to the build tree, one per line), so that a build made to run
a few suites (dev.sh's sanitizer trees) compiles those and nothing else.

    targets_of_tests.py BUILD_DIR [ctest's selection arguments: -L ..., -E ..., -R ...]

A test needs its program when that is one of the build's (bin/<test>: the program's own
dependencies, the tools it starts, come with it), and every file of the build tree its
command line or environment names (an emulated verbs library, say). A test whose program is
a script (sh, cmake -P) finds collx's tools through their directory: it gets all of them.
Exits non-zero, saying why, when ctest fails or the selection names no test.
"""
import json
import os
import subprocess
import sys

# Every tool a script may start from the build's bin/ directory.
TOOLS = ["collx-run", "collx-info", "collx-bench", "collx-trace", "collx-test-worker",
         "collx-test-store-helper"]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    build = os.path.realpath(sys.argv[1])
    listing = subprocess.run(
        ["ctest", "--test-dir", build, "-N", "--show-only=json-v1"] + sys.argv[2:],
        capture_output=True, text=True)
    if listing.returncode != 0:
        sys.exit("targets_of_tests: ctest failed: %s" % listing.stderr.strip())
    tests = json.loads(listing.stdout).get("tests", [])
    if not tests:
        sys.exit("targets_of_tests: the selection %s names no test in %s" % (sys.argv[2:], build))

    needed = set()
    prefix = build + os.sep

    def note(word):
        for part in word.split("="):  # VAR=/path and --opt=/path
            path = os.path.normpath(part)
            if path.startswith(prefix) and "/CMakeFiles/" not in path:
                relative = path[len(prefix):]
                if relative.startswith(("bin/", "lib/")) and relative not in ("bin", "lib"):
                    needed.add(relative)

    for test in tests:
        command = test.get("command") or []
        words = list(command)
        for prop in test.get("properties", []):
            if prop.get("name") == "ENVIRONMENT":
                words += prop.get("value", [])
        for word in words:
            note(word)
        program = os.path.normpath(command[0]) if command else ""
        if not program.startswith(prefix + "bin" + os.sep):
            needed.update("bin/" + tool for tool in TOOLS)

    # Only outputs the build knows (a build without a part has no target for it).
    known = subprocess.run(["ninja", "-C", build, "-t", "targets", "all"],
                           capture_output=True, text=True)
    if known.returncode == 0:
        outputs = {line.split(":", 1)[0] for line in known.stdout.splitlines()}
        needed &= outputs
    print("\n".join(sorted(needed)))


if __name__ == "__main__":
    main()
