"""The API fuzzed from its own OpenAPI schema (schemathesis), as each role: no request gets a
5xx, every response matches the schema, and no request crosses a role (a 2xx only for the roles
the policy below gives the route; a labeler's labelings are only their own). Bounded examples,
derandomized: the same requests every run, so a failure reproduces and CI never flakes."""

import pytest
import schemathesis
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import response_schema_conformance

from labeling.services import queue, tokens
from tests.conftest import make_user
from tests.factories import make_batch, make_solution

EXAMPLES = 8  # per operation and role: a few minutes for the whole API

# Who may get a 2xx from each route, written down here rather than read from the views, so a
# view that loses its role check fails this test. Leads run the queues and the loop,
# researchers also take the data out; a labeler reads only their own labelings.
EVERY_ROLE = {"labeler", "lead", "researcher"}
POLICY = [
    ("/api/labelings/", EVERY_ROLE),
    ("/api/export/", {"researcher"}),
    ("/api/snapshots/", {"researcher"}),
    ("/api/", {"lead", "researcher"}),  # problems, batches, solutions, runs, models, generations
]


def allowed_roles(path: str) -> set[str]:
    return next(roles for prefix, roles in POLICY if path.startswith(prefix))


@pytest.fixture
def role_headers(db):
    batch = make_batch(gold_rate=0, overlap=2)
    make_solution(batch)
    headers = {}
    for role in ("labeler", "lead", "researcher"):
        user = make_user(f"fuzz-{role}", role)
        _, key = tokens.token_create(user=user, name="fuzz", expires_in=None)
        headers[role] = {"Authorization": f"Token {key}"}
    # Someone else's labeling of the same solution: the fuzzed labeler must never see it.
    queue.claim_next(make_user("fuzz-other", "labeler"))
    return headers


def crossed_role(operation, role: str, response) -> str | None:
    """Why this answer gives `role` more than its share, or None."""
    if not 200 <= response.status_code < 300:
        return None
    if role not in allowed_roles(operation.path):
        return f"answered {response.status_code} to a {role}"
    if role == "labeler" and operation.path.startswith("/api/labelings/"):
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


def test_the_role_check_flags_a_crossing_and_passes_a_refusal():
    from types import SimpleNamespace

    def answer(status, body=None):
        return SimpleNamespace(status_code=status, json=lambda: body)

    export = SimpleNamespace(path="/api/export/")
    labelings = SimpleNamespace(path="/api/labelings/")
    assert crossed_role(export, "labeler", answer(200)) == "answered 200 to a labeler"
    assert crossed_role(export, "labeler", answer(403)) is None
    assert crossed_role(export, "researcher", answer(200)) is None
    others = {"results": [{"labeler": "fuzz-labeler"}, {"labeler": "fuzz-other"}]}
    assert "fuzz-other" in crossed_role(labelings, "labeler", answer(200, others))
    assert crossed_role(labelings, "labeler", answer(200, {"labeler": "fuzz-labeler"})) is None
