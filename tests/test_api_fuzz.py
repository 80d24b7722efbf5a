"""The API fuzzed from its own OpenAPI schema (schemathesis), as each role: no request gets a
5xx, and every response matches the schema. Bounded examples, derandomized: the same requests
every run, so a failure reproduces and CI never flakes."""

import pytest
import schemathesis
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, given, settings
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import response_schema_conformance

from tests.conftest import make_user
from tests.factories import make_batch, make_solution

EXAMPLES = 8  # per operation and role: a few minutes for the whole API


@pytest.fixture
def role_headers(db):
    make_solution(make_batch(gold_rate=0))
    headers = {}
    for role in ("labeler", "lead", "researcher"):
        user = make_user(f"fuzz-{role}", role)
        headers[role] = {"Authorization": f"Token {Token.objects.create(user=user).key}"}
    return headers


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
                case.call_and_validate(
                    base_url=live_server.url,
                    headers=headers,
                    checks=[not_a_server_error, response_schema_conformance],
                )
            except FailureGroup as failure:
                failures.append(f"{operation.label} as {role}: {failure}"[:1500])

    return fuzz


@pytest.mark.django_db(transaction=True)
def test_no_api_request_gets_a_server_error_or_leaves_the_schema(live_server, role_headers):
    schema = schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20  # every route of the API, not an empty schema
    failures: list[str] = []
    for operation in operations:
        _fuzzer(operation, live_server, role_headers, failures)()
    assert not failures, "\n\n".join(failures)
