"""The API fuzzed from its own OpenAPI schema (schemathesis), as each role: no request gets a
5xx, every response matches the schema, and no request crosses a role (a 2xx only for the roles
the policy below gives the route; a labeler's labelings are only their own) or a project (two
projects: the fuzzed routes are the Default project's, and a user who holds every role in the
other project never gets a 2xx there, read or write). Bounded examples, derandomized: the same
requests every run, so a failure reproduces and CI never flakes."""

import pytest
import schemathesis
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, given, settings
from rest_framework.test import APIClient
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import response_schema_conformance

from labeling.models import Project
from labeling.services import tokens
from stepwise import celery
from tests.factories import make_batch, make_solution
from tests.helpers.users import make_user
from tests.labeling.helpers import next_labeling

EXAMPLES = 8  # per operation and role: a few minutes for the whole API

# Who may get a 2xx from each route, written down here rather than read from the views, so a
# view that loses its role check fails this test. Leads run the queues and the loop,
# researchers also take the data out; a labeler reads only their own labelings.
EVERY_ROLE = {"labeler", "lead", "researcher"}
POLICY = [
    ("/api/projects/", EVERY_ROLE | {"other-project"}),  # the caller's own projects
    ("/p/default/api/labelings/", EVERY_ROLE),
    ("/p/default/api/export/", {"researcher"}),
    ("/p/default/api/snapshots/", {"researcher"}),
    (
        "/p/default/api/",
        {"lead", "researcher"},
    ),  # problems, batches, solutions, runs, models, generations
]


def allowed_roles(path: str) -> set[str]:
    return next(roles for prefix, roles in POLICY if path.startswith(prefix))


@pytest.fixture
def work_not_run(monkeypatch) -> list[str]:
    """What the API answers is under test here, not the work a request starts: on SQLite tasks
    run eagerly, in the request, so a fuzzed POST to /api/sampling-runs/ ran SmolLM2 for as long
    as the fuzzed sizes said, past the client's timeout and on into the next tests (their CPU,
    torch's random numbers, their database). Every task a request sends is recorded by name
    instead (the tasks have tests of their own)."""
    sent: list[str] = []
    monkeypatch.setattr(celery, "enqueue_on_commit", lambda task, *args, **kw: sent.append(task))
    monkeypatch.setattr(celery, "run_in_thread", lambda name, work: sent.append(name))
    return sent


@pytest.fixture
def role_headers(db, work_not_run):
    batch = make_batch(gold_rate=0, overlap=2)
    make_solution(batch)
    headers = {}
    for role in ("labeler", "lead", "researcher"):
        user = make_user(f"fuzz-{role}", role)
        _, key = tokens.token_create(user=user, name="fuzz", expires_in=None)
        headers[role] = {"Authorization": f"Token {key}"}
    # Someone else's labeling of the same solution: the fuzzed labeler must never see it.
    next_labeling(make_user("fuzz-other", "labeler"))
    # A second project, with its own batch, and a user holding every role there only.
    other = Project.objects.create(name="Other", slug="other")
    make_solution(make_batch(name="other's", project=other))
    stranger = make_user("fuzz-stranger", "labeler", "lead", "researcher", project=other)
    _, key = tokens.token_create(user=stranger, name="fuzz", expires_in=None)
    headers["other-project"] = {"Authorization": f"Token {key}"}
    return headers


def crossed_role(operation, role: str, response) -> str | None:
    """Why this answer gives `role` more than its share, or None."""
    if not 200 <= response.status_code < 300:
        return None
    if role not in allowed_roles(operation.path):
        return f"answered {response.status_code} to a {role}"
    if role == "other-project" and operation.path.startswith("/api/projects/"):
        if [row["slug"] for row in response.json()] != ["other"]:
            return f"listed projects not theirs: {response.json()}"
    if role == "labeler" and operation.path.startswith("/p/default/api/labelings/"):
        body = response.json()
        rows = body.get("results", [body])
        strangers = {row.get("labeler") for row in rows} - {"fuzz-labeler"}
        if strangers:
            return f"showed a labeler labelings of {sorted(strangers)}"
    return None


def _fuzzer(operation, live_server, role_headers, failures):
    """A Hypothesis test over one operation's generated requests, sent as every role."""

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def fuzz(case):
        for role, headers in role_headers.items():
            try:
                response = case.call_and_validate(
                    base_url=live_server.url,
                    headers=headers,
                    checks=[not_a_server_error, response_schema_conformance],
                )
            except FailureGroup as failure:
                failures.append(f"{operation.label} as {role}: {failure}"[:1500])
                continue
            crossed = crossed_role(operation, role, response)
            if crossed:
                failures.append(f"{operation.label} as {role}: {crossed}: {case.as_curl_command()}")

    return fuzz


@pytest.mark.django_db(transaction=True)
def test_no_api_request_gets_a_server_error_leaves_the_schema_or_crosses_a_role(
    live_server, role_headers
):
    schema = schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20  # every route of the API, not an empty schema
    failures: list[str] = []
    for operation in operations:
        _fuzzer(operation, live_server, role_headers, failures)()
    assert not failures, "\n\n".join(failures)


# Explicit examples beside the fuzz: what Hypothesis is unlikely to draw. A body nested 5,000
# deep (RecursionError in json), a number past Python's 4,300 digits, and ids past 64 bits (SQLite's
# driver raises OverflowError) are each a 400, and nothing is written.
DEEP = "[" * 5000 + "]" * 5000
HUGE_NUMBER = '{"k": 1' + "0" * 5000 + "}"
BODIES = [
    ("lead", "/p/default/api/generations/", DEEP),
    ("lead", "/p/default/api/generations/", HUGE_NUMBER),
    ("lead", "/p/default/api/runs/", '{"config": ' * 2000 + "{}" + "}" * 2000),
    ("lead", "/p/default/api/sampling-runs/", DEEP),
    ("researcher", "/p/default/api/snapshots/", '{"batch": [' + "[" * 5000 + "]" * 5000 + "]}"),
    ("researcher", "/p/default/api/snapshots/", '{"since_snapshot": 9' + "9" * 4400 + "}"),
    ("lead", "/p/default/api/batches/{batch}/problems/", DEEP),
    ("lead", "/p/default/api/sampling-runs/", '{"problems": [1180591620717411303424]}'),
    ("lead", "/p/default/api/sampling-runs/", '{"batch": 9223372036854775808}'),
    ("lead", "/p/default/api/sampling-runs/", '{"limit": 1180591620717411303424}'),
    ("lead", "/p/default/api/batches/{batch}/problems/", '{"problems": [1180591620717411303424]}'),
    ("lead", "/p/default/api/generations/", '{"per_problem_k": 1180591620717411303424}'),
    ("lead", "/p/default/api/batches/{batch}/prelabel/", DEEP),
    ("lead", "/p/default/api/batches/{batch}/prelabel/", '{"mode": "suggest", "judge": NaN}'),
    (
        "lead",
        "/p/default/api/batches/{batch}/prelabel/",
        '{"mode": 1' + "0" * 5000 + ', "judge": "prm"}',
    ),
]


def _written() -> list[int]:
    from labeling.models import Snapshot, Solution
    from modeling.models import GenerationRun, SamplingRun, TrainingRun

    models = (GenerationRun, SamplingRun, TrainingRun, Snapshot, Solution)
    return [model.objects.count() for model in models]


@pytest.mark.django_db
@pytest.mark.parametrize("role, path, body", BODIES)
def test_a_hostile_json_body_is_refused_with_400_and_writes_nothing(role, path, body):
    from labeling.models import Batch

    batch = make_batch(protocol=Batch.Protocol.ALTERNATIVES)
    client = APIClient()
    client.force_authenticate(make_user(f"hostile-{role}", role))
    before = _written()
    response = client.generic(
        "POST", path.format(batch=batch.pk), body, content_type="application/json"
    )
    assert response.status_code == 400, response.content[:300]
    assert _written() == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    "query",
    [
        "batch=9223372036854775808",
        f"batch={2**70}",
        f"solution={2**70}",
        f"batch={'9' * 5000}",
    ],
)
def test_labelings_filtered_by_an_id_past_64_bits_answer_400(query):
    client = APIClient()
    client.force_authenticate(make_user("hostile-lead", "lead"))
    response = client.get(f"/p/default/api/labelings/?{query}")
    assert response.status_code == 400, response.content[:300]


def test_the_role_check_flags_a_crossing_and_passes_a_refusal():
    from types import SimpleNamespace

    def answer(status, body=None):
        return SimpleNamespace(status_code=status, json=lambda: body)

    export = SimpleNamespace(path="/p/default/api/export/")
    labelings = SimpleNamespace(path="/p/default/api/labelings/")
    assert crossed_role(export, "labeler", answer(200)) == "answered 200 to a labeler"
    assert crossed_role(export, "labeler", answer(403)) is None
    assert crossed_role(export, "researcher", answer(200)) is None
    others = {"results": [{"labeler": "fuzz-labeler"}, {"labeler": "fuzz-other"}]}
    assert "fuzz-other" in crossed_role(labelings, "labeler", answer(200, others))
    assert crossed_role(labelings, "labeler", answer(200, {"labeler": "fuzz-labeler"})) is None
