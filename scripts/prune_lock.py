"""Drop from a pip-compile lock the packages that only the named packages pull in.

`make lock` compiles pyproject's extras with the backbone wheels' unused dependencies
(llama-cpp-python, llm, sentence-transformers) marked `--unsafe-package`: pip-compile then
leaves those out but still pins what only they need (openai, scikit-learn, ...). This removes
every pin whose `# via` lines name nothing but dropped packages (with its `--hash` lines),
repeatedly, so the lock, installed with `pip install --require-hashes --no-deps -r`, holds
exactly what the project imports.

    python scripts/prune_lock.py requirements.lock llama-cpp-python llm sentence-transformers
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==")
LOCAL_LABEL = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*==[^+\s]+)\+[A-Za-z0-9.]+", re.MULTILINE)


def blocks(lines: list[str]) -> list[tuple[str | None, list[str]]]:
    """The lock cut into (pinned name or None, its lines) blocks: a pin owns the indented lines
    under it, its `--hash` lines and its `# via` comment."""
    out: list[tuple[str | None, list[str]]] = []
    for line in lines:
        match = PIN.match(line)
        if match:
            out.append((match.group(1).lower(), [line]))
        elif out and out[-1][0] is not None and line.startswith("    "):
            out[-1][1].append(line)
        else:
            out.append((None, [line]))
    return out


def via(block: list[str]) -> set[str]:
    names: set[str] = set()
    for line in block[1:]:
        if not line.lstrip().startswith("#"):
            continue  # a --hash line
        text = line.strip().lstrip("#").strip()
        if text.startswith("via "):
            text = text[len("via ") :]
        if text and text != "via":
            names.add(text.lower())
    return names


def prune(text: str, dropped: set[str]) -> tuple[str, list[str]]:
    parsed = blocks(text.splitlines())
    removed = {name.lower() for name in dropped}
    pruned: list[str] = []
    changed = True
    while changed:
        changed = False
        for name, block in parsed:
            if name and name not in removed and via(block) and via(block) <= removed:
                removed.add(name)
                pruned.append(name)
                changed = True
    kept = [line for name, block in parsed if name not in removed or name is None for line in block]
    return "\n".join(kept) + "\n", sorted(pruned)


def public_versions(text: str) -> str:
    """`torch==2.13.0+cpu` -> `torch==2.13.0`. pip-compile pins the local CPU wheel it found on
    this disk; PyPI has no `+cpu` release, and `==2.13.0` still matches that wheel (PEP 440
    ignores a candidate's local label when the pin has none), so the lock installs anywhere."""
    return LOCAL_LABEL.sub(r"\1", text)


# pip-compile's note over the unpinned packages when it writes hashes.
HASH_WARNING = """\
# WARNING: The following packages were not pinned, but pip requires them to be
# pinned when the requirements file includes hashes and the requirement is not
# satisfied by a package already installed. Consider using the --allow-unsafe flag.
"""
UNPINNED = """\
# Not pinned on purpose (make lock's --unsafe-package): `make install` upgrades pip on its own
# and installs this lock with --no-deps, so pip never asks for the backbone wheels' unused
# dependencies (--allow-unsafe would pin them, and llama-cpp-python compiles from source):
"""


def unpinned_note(text: str) -> str:
    """pip-compile's advice to pin the unsafe packages, replaced by why they stay out."""
    return text.replace(HASH_WARNING, UNPINNED)


def main(argv: list[str]) -> int:
    path, dropped = Path(argv[0]), set(argv[1:])
    text, pruned = prune(path.read_text(), dropped)
    text = public_versions(text)
    noted = unpinned_note(text)
    path.write_text(noted)
    print(f"{path}: dropped {len(pruned)} pins only {', '.join(sorted(dropped))} need:")
    print("  " + " ".join(pruned))
    if noted != text:
        print(f"{path}: pip-compile's WARNING on the unpinned packages answered in the lock")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
