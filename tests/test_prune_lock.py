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


HASHED = """\
#    make lock
openai==3.54.0 \\
    --hash=sha256:1111111111111111111111111111111111111111111111111111111111111111 \\
    --hash=sha256:2222222222222222222222222222222222222222222222222222222222222222
    # via llm
pydantic==2.14.3 \\
    --hash=sha256:3333333333333333333333333333333333333333333333333333333333333333
    # via
    #   llm
    #   typer
torch==2.13.0+cpu \\
    --hash=sha256:6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b
    # via stepwise (pyproject.toml)

# WARNING: The following packages were not pinned, but pip requires them to be
# pinned when the requirements file includes hashes and the requirement is not
# satisfied by a package already installed. Consider using the --allow-unsafe flag.
# llm
"""


def test_a_dropped_pin_goes_with_its_hashes_and_a_kept_one_keeps_them():
    text, pruned = prune_lock.prune(HASHED, {"llm"})
    assert pruned == ["openai"]
    assert "openai" not in text and "1111" not in text and "2222" not in text
    assert "pydantic==2.14.3 \\\n    --hash=sha256:3333" in text
    assert "torch==2.13.0+cpu \\\n    --hash=sha256:6746dbcb" in text


def test_the_local_label_goes_from_a_hashed_pin_and_its_hash_stays():
    text = prune_lock.public_versions(HASHED)
    assert "torch==2.13.0 \\\n    --hash=sha256:6746dbcb" in text and "+cpu" not in text


def test_the_advice_to_pin_the_left_out_packages_becomes_why_they_stay_out():
    text = prune_lock.unpinned_note(HASHED)
    assert "--allow-unsafe flag" not in text and "Not pinned on purpose" in text
    assert text.endswith("# llm\n")
