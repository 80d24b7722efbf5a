import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "prune_lock.py"
spec = importlib.util.spec_from_file_location("prune_lock", SCRIPT)
assert spec and spec.loader
prune_lock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prune_lock)

LOCK = """\
#    make lock
openai==3.54.0
    # via llm
jiter==0.19.0
    # via openai
pydantic==2.14.3
    # via
    #   llm
    #   typer
torch==2.13.0+cpu
    # via stepwise (pyproject.toml)

# The following packages are considered to be unsafe in a requirements file:
# llm
"""


def test_pins_only_the_dropped_packages_need_go_and_shared_ones_stay():
    text, pruned = prune_lock.prune(LOCK, {"llm"})
    assert pruned == ["jiter", "openai"]
    assert "openai" not in text and "jiter" not in text
    assert "pydantic==2.14.3" in text and "torch==2.13.0+cpu" in text and "# llm" in text


def test_local_version_labels_are_dropped_so_the_lock_installs_from_pypi_too():
    text = prune_lock.public_versions(LOCK)
    assert "torch==2.13.0\n" in text and "+cpu" not in text
    assert "pydantic==2.14.3\n" in text  # public pins untouched
