"""The REST API: auth, role-based access, uploads, snapshots, bad input, the OpenAPI schema."""

import io
import json

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from labeling.models import Batch, Labeling, Problem, Snapshot, Solution
from tests.helpers.users import api_client_for, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(researcher):
    return api_client_for(researcher)


def _upload(name: str, content: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content, content_type="application/jsonl")


# --- auth and roles ---------------------------------------------------------------------------


def test_token_auth_is_required():
    response = APIClient().get("/p/default/api/problems/")
    assert response.status_code == 401
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    assert bad.get("/p/default/api/problems/").status_code == 401


def test_session_auth_works_for_the_browser(client, researcher, samples):
    client.force_login(researcher)
    assert client.get("/p/default/api/problems/").status_code == 200


def test_labeler_reads_only_their_own_labelings(samples, labeler, labeler2, lead):
    solution = Solution.objects.first()
    mine = Labeling.objects.create(solution=solution, labeler=labeler)
    Labeling.objects.create(solution=solution, labeler=labeler2)
    body = api_client_for(labeler).get("/p/default/api/labelings/").json()
    assert [row["id"] for row in body["results"]] == [mine.pk]
    others = Labeling.objects.exclude(labeler=labeler).first()
    assert api_client_for(labeler).get(f"/p/default/api/labelings/{others.pk}/").status_code == 404
    assert len(api_client_for(lead).get("/p/default/api/labelings/").json()["results"]) == 8


@pytest.mark.parametrize("persona", ["labeler", "lead", "outsider"])
def test_only_researchers_export(persona, request, samples):
    client = api_client_for(request.getfixturevalue(persona))
    refused = 404 if persona == "outsider" else 403  # no role in the project: as if absent
    assert (
        client.post("/p/default/api/snapshots/", {"format": "prm800k"}, format="json").status_code
        == refused
    )
    assert client.get("/p/default/api/snapshots/").status_code == refused
    assert client.get("/p/default/api/export/").status_code == refused
    assert not Snapshot.objects.exists()


def test_labelers_and_outsiders_cannot_read_problems_or_import(labeler, outsider):
    # A labeler of the project is refused (403); an outsider, with no role in it, is answered
    # as if it did not exist (404).
    for user, refused in ((labeler, 403), (outsider, 404)):
        client = api_client_for(user)
        assert client.get("/p/default/api/problems/").status_code == refused
        upload = _upload("x.jsonl", b"{}\n")
        assert (
            client.post(
                "/p/default/api/solutions/import-prm800k/", {"file": upload}, format="multipart"
            ).status_code
            == refused
        )
    assert api_client_for(outsider).get("/p/default/api/labelings/").status_code == 404
    assert not Solution.objects.exists() and not Problem.objects.exists()


# --- reading with filters and cursor pagination ---------------------------------------------


def test_cursor_pagination_walks_every_row(api, samples):
    seen, url = [], "/p/default/api/labelings/?page_size=4"
    while url:
        body = api.get(url).json()
        assert "cursor=" in (body["next"] or "cursor=")
        seen += [row["id"] for row in body["results"]]
        url = body["next"]
    assert sorted(seen) == sorted(Labeling.objects.values_list("pk", flat=True)) and len(seen) == 6


def test_filters(api, samples):
    assert len(api.get("/p/default/api/labelings/?finish_reason=give_up").json()["results"]) == 1
    assert [
        row["generation"]
        for row in api.get("/p/default/api/solutions/?generation=6").json()["results"]
    ] == [6]
    batch = Batch.objects.get(generation=6)
    assert len(api.get(f"/p/default/api/labelings/?batch={batch.pk}").json()["results"]) == 1
    assert (
        api.get("/p/default/api/batches/?generation=6").json()["results"][0]["name"]
        == "PRM800K generation 6"
    )


def test_labeling_detail_has_steps_and_completions(api, samples):
    labeling = Labeling.objects.get(finish_reason="found_error")
    body = api.get(f"/p/default/api/labelings/{labeling.pk}/").json()
    assert len(body["step_labels"]) == 7
    assert [c["rating"] for c in body["step_labels"][6]["completions"]] == [-1, 1, 1, 1]


# --- uploads ----------------------------------------------------------------------------------


def test_prm800k_upload_imports_and_round_trips_through_the_api(
    api, shared_data, media_root, eager_tasks
):
    content = (shared_data / "prm800k" / "samples.jsonl").read_bytes()
    response = api.post(
        "/p/default/api/solutions/import-prm800k/",
        {"file": _upload("s.jsonl", content)},
        format="multipart",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["created"]["labelings"] == 6
    with eager_tasks():
        created = api.post("/p/default/api/snapshots/", {"format": "prm800k"}, format="json")
    assert created.status_code == 202
    snapshot = api.get(f"/p/default/api/snapshots/{created.json()['id']}/").json()
    assert snapshot["status"] == "done" and snapshot["progress_percent"] == 100
    assert snapshot["row_count"] == 6 and snapshot["step_label_count"] == 46
    download = api.get(snapshot["download_url"])
    assert download.status_code == 200 and download["X-Checksum-SHA256"] == snapshot["sha256"]
    assert b"".join(download.streaming_content) == content
    created_on = Snapshot.objects.get(pk=snapshot["id"]).created_at.date()
    assert download["Content-Disposition"] == (
        f'attachment; filename="snapshot-{snapshot["id"]}-prm800k-{created_on}.jsonl"'
    )


def test_direct_export_streams_byte_exact(api, samples):
    response = api.get("/p/default/api/export/?format=prm800k")
    assert response.status_code == 200 and response.streaming
    assert b"".join(response.streaming_content) == samples.read_bytes()
    only_gen6 = b"".join(
        api.get("/p/default/api/export/?generation=6&generation=7").streaming_content
    )
    assert only_gen6.count(b"\n") == 1 and b'"generation": 6' in only_gen6


def test_direct_export_is_named_for_its_batch_format_and_date(api, samples):
    batch = Batch.objects.get(generation=6)
    batch.name = 'Gén 6 "redo", ünïcode'
    batch.save(update_fields=["name"])
    before = timezone.localdate()
    response = api.get(f"/p/default/api/export/?format=prm800k&batch={batch.pk}")
    after = timezone.localdate()
    assert b"".join(response.streaming_content).count(b"\n") == 1
    assert response["Content-Disposition"] in {
        f'attachment; filename="gen-6-redo-unicode-prm800k-{day}.jsonl"' for day in (before, after)
    }
    parquet = api.get("/p/default/api/export/?format=stepwise_parquet")
    assert parquet["Content-Disposition"] in {
        f'attachment; filename="stepwise-stepwise_parquet-{day}.parquet"' for day in (before, after)
    }


def test_direct_export_parquet(api, samples):
    import pyarrow.parquet as pq

    response = api.get("/p/default/api/export/?format=stepwise_parquet&alternatives=false")
    assert response.status_code == 200
    table = pq.read_table(io.BytesIO(b"".join(response.streaming_content)))
    assert table.num_rows == 6


def test_bad_upload_names_every_bad_line_and_writes_nothing(api, shared_data):
    lines = (shared_data / "prm800k" / "samples.jsonl").read_text().splitlines()
    broken = json.loads(lines[2])
    broken["label"]["steps"][0]["completions"][0]["rating"] = "good"
    lines[2] = json.dumps(broken)
    lines[4] = lines[4][:-3]
    response = api.post(
        "/p/default/api/solutions/import-prm800k/",
        {"file": _upload("bad.jsonl", ("\n".join(lines) + "\n").encode())},
        format="multipart",
    )
    assert response.status_code == 400
    body = response.json()
    assert "nothing was imported" in body["detail"]
    assert [(e["line"], e["field"]) for e in body["errors"]] == [
        (3, "label.steps[0].completions[0].rating"),
        (5, "line"),
    ]
    assert Labeling.objects.count() == 0 and Problem.objects.count() == 0


def test_sample_upload_into_a_batch(api):
    content = (
        json.dumps(
            {
                "problem": "2+2?",
                "ground_truth_answer": "4",
                "steps": ["2+2=4.", "# Answer\n\n4"],
                "answer": "4",
            }
        )
        + "\n"
    ).encode()
    response = api.post(
        "/p/default/api/solutions/import-samples/",
        {
            "file": _upload("samples.jsonl", content),
            "batch_name": "gen 2",
            "overlap": 3,
            "generation": 2,
        },
        format="multipart",
    )
    assert response.status_code == 201 and response.json()["created"]["solutions"] == 1
    assert Batch.objects.get(name="gen 2").overlap == 3


def test_sample_upload_errors_name_line_and_field(api):
    content = b'{"problem": "p", "steps": ["ok"]}\n{"unique_id": "nope/1.json", "steps": ["x"]}\n'
    response = api.post(
        "/p/default/api/solutions/import-samples/",
        {"file": _upload("s.jsonl", content), "batch_name": "b"},
        format="multipart",
    )
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"line": 2, "field": "unique_id", "message": "no problem 'nope/1.json'; import it first"}
    ]
    assert not Batch.objects.filter(name="b").exists() and Problem.objects.count() == 0


def test_bad_json_upload_names_line_and_column_like_the_command(api):
    content = b'{"problem": "1+1?"}\n{"problem": "2+2?\n'
    response = api.post(
        "/p/default/api/solutions/import-prm800k/",
        {"file": _upload("f.jsonl", content)},
        format="multipart",
    )
    assert response.status_code == 400
    assert response.json()["errors"][1] == {
        "line": 2,
        "field": "line",
        "message": "not valid JSON: Unterminated string starting at column 13",
    }
    pretty = _upload("p.jsonl", b'{\n  "problem": "1+1?"\n}\n')
    response = api.post(
        "/p/default/api/solutions/import-prm800k/", {"file": pretty}, format="multipart"
    )
    assert (
        response.status_code == 400
        and "looks pretty-printed; one JSON object per line"
        in response.json()["errors"][0]["message"]
    )
    assert Problem.objects.count() == 0


@pytest.mark.parametrize(
    "content,message",
    [(b"", "empty"), (b"\n\n", "no records"), (b"\xff\xfe{}\n", "not UTF-8")],
)
def test_empty_blank_and_binary_uploads_are_400(api, content, message):
    response = api.post(
        "/p/default/api/solutions/import-prm800k/",
        {"file": _upload("f.jsonl", content)},
        format="multipart",
    )
    assert response.status_code == 400 and message in json.dumps(response.json())
    assert not Solution.objects.exists() and not Problem.objects.exists()


def test_huge_upload_is_refused(api, settings):
    settings.STEPWISE_UPLOAD_MAX_BYTES = 10
    response = api.post(
        "/p/default/api/solutions/import-prm800k/",
        {"file": _upload("f.jsonl", b"{}" * 20)},
        format="multipart",
    )
    assert response.status_code == 400 and "limit is 10" in response.json()["detail"]
    assert not Solution.objects.exists() and not Problem.objects.exists()


def test_upload_without_a_file_is_400(api):
    response = api.post("/p/default/api/solutions/import-prm800k/", {}, format="multipart")
    assert response.status_code == 400 and "file" in response.json()
    assert not Solution.objects.exists() and not Problem.objects.exists()


# --- bad input never gives a 500 --------------------------------------------------------------


def test_malformed_json_body_is_400(api):
    response = api.generic(
        "POST", "/p/default/api/snapshots/", "{not json", content_type="application/json"
    )
    assert response.status_code == 400 and "JSON parse error" in response.json()["detail"]


@pytest.mark.parametrize(
    "body,field",
    [
        ({"format": "csv"}, "format"),
        ({"batch": "one"}, "batch"),
        ({"batch": [99999]}, "batch"),
        ({"generation": ["x"]}, "generation"),
        ({"labeler": ["ghost"]}, "labeler"),
        ({"finished_after": "yesterday"}, "finished_after"),
        ({"finish_reason": ["bored"]}, "finish_reason"),
        ({"since_snapshot": 424242}, "since_snapshot"),
        ({"test_fraction": 2}, "test_fraction"),
        ({"neutral": "maybe"}, "neutral"),
        ({"complete_only": "perhaps"}, "complete_only"),
    ],
)
def test_wrong_types_and_unknown_ids_are_400_naming_the_field(api, body, field):
    response = api.post("/p/default/api/snapshots/", body, format="json")
    assert response.status_code == 400 and field in response.json()
    assert Snapshot.objects.count() == 0


def test_unknown_and_malformed_ids_are_404(api):
    for url in (
        "/p/default/api/snapshots/999/",
        "/p/default/api/snapshots/abc/",
        "/p/default/api/labelings/999/",
        "/p/default/api/problems/x/",
        "/p/default/api/snapshots/999/download/",
    ):
        assert api.get(url).status_code == 404, url


def test_bad_filter_values_are_400(api):
    assert api.get("/p/default/api/labelings/?batch=abc").status_code == 400
    assert api.get("/p/default/api/export/?format=xml").status_code == 400
    assert (
        api.get("/p/default/api/labelings/?cursor=garbage").status_code == 404
    )  # DRF: invalid cursor


def test_downloading_an_unfinished_snapshot_is_409(api):
    snapshot = Snapshot.objects.create()
    response = api.get(f"/p/default/api/snapshots/{snapshot.pk}/download/")
    assert response.status_code == 409 and "pending" in response.json()["detail"]


def test_snapshots_cannot_be_changed_or_deleted(api, samples):
    snapshot = Snapshot.objects.create(status=Snapshot.Status.DONE)
    for method in ("put", "patch", "delete"):
        assert (
            getattr(api, method)(
                f"/p/default/api/snapshots/{snapshot.pk}/", {}, format="json"
            ).status_code
            == 405
        )


# --- OpenAPI ----------------------------------------------------------------------------------


def test_schema_is_valid_and_covers_every_endpoint(tmp_path):
    out = tmp_path / "schema.yaml"
    # --fail-on-warn turns any schema warning (an undocumentable view) into an error
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    paths = set(yaml.safe_load(out.read_text())["paths"])
    from labeling.urls import router

    expected = {"/p/default/api/export/"}
    for prefix, _, _ in router.registry:
        expected |= {f"/p/default/api/{prefix}/", f"/p/default/api/{prefix}/{{id}}/"}
    expected |= {
        "/p/default/api/solutions/import-samples/",
        "/p/default/api/solutions/import-prm800k/",
        "/p/default/api/snapshots/{id}/download/",
    }
    assert expected <= paths, expected - paths


def test_docs_page_renders_from_our_static_files(client, researcher):
    client.force_login(researcher)
    page = client.get(reverse("api-docs"))
    assert page.status_code == 200
    html = page.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html
    assert "cdn" not in html.lower() and "unpkg" not in html
    assert (
        client.get(
            "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"
        ).status_code
        == 200
    )
    schema = client.get(reverse("api-schema"))
    assert schema.status_code == 200


def test_a_new_user_token_can_be_made(researcher):
    from labeling.services.tokens import token_create

    _, key = token_create(user=make_user("robin", "researcher"), name="robin", expires_in=None)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/p/default/api/snapshots/").status_code == 200


@pytest.mark.parametrize("name", ["api-schema", "api-docs", "api-redoc"])
def test_the_schema_and_docs_pages_are_for_signed_in_users(client, labeler, name):
    anonymous = client.get(reverse(name))
    # 401 with the scheme to use: the token authentication comes first (REST_FRAMEWORK settings)
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"] == "Token"
    client.force_login(labeler)
    assert client.get(reverse(name)).status_code == 200


@pytest.mark.parametrize(
    "value",
    [
        "2026-01-01T00:00:00 01:00",  # "+01:00" unescaped in a query string: "+" is a space
        "2026-01-01T00:00:00-99:00",
        "9999-12-31T23:59:59-01:00",  # parses, then overflows in UTC: was a 500
        "0001-01-01T00:00:00+01:00",
    ],
)
def test_bad_or_out_of_range_times_are_a_400_on_every_route_that_takes_one(
    samples, researcher, value
):
    client = api_client_for(researcher)
    for url, payload in [
        ("/p/default/api/labelings/", {"finished_after": value}),
        ("/p/default/api/labelings/", {"finished_before": value}),
        ("/p/default/api/export/", {"finished_after": value}),
        ("/p/default/api/export/", {"finished_before": value}),
    ]:
        response = client.get(url, payload)
        assert response.status_code == 400, (url, payload)
        assert list(response.json()) == list(payload), (url, response.json())
    response = client.post(
        "/p/default/api/snapshots/", {"format": "prm800k", "finished_after": value}
    )
    assert response.status_code == 400 and "finished_after" in response.json()
    assert not Snapshot.objects.exists()
    response = client.get(
        "/p/default/api/labelings/", {"finished_after": "2026-01-01T00:00:00+01:00"}
    )
    assert response.status_code == 200  # the same time, with its offset escaped, is fine


def test_an_offset_postgresql_refuses_is_converted_to_utc_not_a_500(samples, researcher):
    """Python takes offsets up to 23:59, PostgreSQL up to 15:59: found by the API fuzz."""
    client = api_client_for(researcher)
    every = client.get("/p/default/api/labelings/").json()["results"]
    response = client.get(
        "/p/default/api/labelings/", {"finished_before": "9000-01-01T00:00:00-19:14"}
    )
    assert response.status_code == 200 and response.json()["results"] == every
    response = client.get(
        "/p/default/api/labelings/", {"finished_after": "9000-01-01T00:00:00+21:11"}
    )
    assert response.status_code == 200 and response.json()["results"] == []
