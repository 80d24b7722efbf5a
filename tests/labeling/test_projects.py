"""Projects: the admin's command, the caller's projects in the API, links that carry the
project, and isolation: someone who is only a member of project B gets a 404 for project A's
pages and endpoints, and B's lists never show A's rows."""

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from labeling.models import Batch, Membership, Project, default_project_id
from stepwise.links import project_reverse
from tests.factories import make_batch
from tests.helpers.users import api_client_for, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def lead2(phase2):
    return make_user("lead2", "lead", "labeler", project=phase2)


def test_create_project_names_its_leads(phase2):
    lea = make_user("lea")
    call_command("create_project", "MATH step by step", "--lead", "lea")
    project = Project.objects.get(slug="math-step-by-step")
    assert set(Membership.objects.filter(project=project).values_list("user", "role")) == {
        (lea.pk, "lead")
    }
    with pytest.raises(CommandError, match="exists already"):
        call_command("create_project", "MATH step by step")
    with pytest.raises(CommandError, match="No user"):
        call_command("create_project", "Other", "--lead", "nobody")
    assert Project.objects.count() == 3  # Default, Phase 2, MATH step by step


def test_the_api_lists_the_callers_projects_only(phase2, lead2):
    make_user("lea", "lead")  # Default only
    answer = api_client_for(lead2).get("/api/projects/").json()
    assert answer == [
        {
            "id": phase2.pk,
            "slug": "phase-2",
            "name": "Phase 2",
            "roles": ["labeler", "lead"],
            "api": "/p/phase-2/api/",
        }
    ]


def test_a_member_of_project_b_gets_404_for_project_a(client, phase2, lead2):
    batch = make_batch()  # in Default
    client.force_login(lead2)
    for path in (
        reverse("labeling:lead_home"),
        reverse("labeling:batch_dashboard", args=[batch.pk]),
        reverse("home"),
        "/p/default/api/batches/",
        f"/p/default/api/batches/{batch.pk}/",
    ):
        assert client.get(path).status_code == 404, path
    api = api_client_for(lead2)
    assert api.get(f"/p/default/api/batches/{batch.pk}/").status_code == 404
    assert api.get("/p/phase-2/api/batches/").json()["results"] == []  # A's batch not listed
    assert api.get(f"/p/phase-2/api/batches/{batch.pk}/").status_code == 404
    assert client.get("/p/no-such-project/label/").status_code == 404


def test_links_stay_in_the_project_of_the_page(client, phase2, lead2):
    Batch.objects.create(project=phase2, name="second")
    client.force_login(lead2)
    page = client.get(project_reverse("phase-2", "labeling:lead_home"))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'href="/p/phase-2/label/lead/"' in html and "/p/default/" not in html
    assert "second" in html and 'id="project-current"' in html


def test_an_old_link_leads_into_the_users_only_project(client, phase2, lead2):
    client.force_login(lead2)
    answer = client.get("/label/lead/?x=1")
    assert answer.status_code == 302 and answer["Location"] == "/p/phase-2/label/lead/?x=1"
    assert client.get("/").status_code == 302  # one project: straight to its home


def test_an_old_api_path_signs_in_as_the_api_does_and_leads_into_the_project(client, phase2, lead2):
    """A script written before projects keeps its token: GET is sent on, a POST is sent on as a
    POST (307); without credentials it is the API's 401/403 in JSON, not the sign-in page."""
    api = api_client_for(lead2)
    answer = api.get("/api/batches/?page=2")
    assert answer.status_code == 302 and answer["Location"] == "/p/phase-2/api/batches/?page=2"
    posted = api.post("/api/batches/", {"name": "x"}, format="json")
    assert posted.status_code == 307 and posted["Location"] == "/p/phase-2/api/batches/"
    assert not Batch.objects.filter(name="x").exists()  # only sent on, nothing written
    anonymous = client.get("/api/batches/")
    assert anonymous.status_code in (401, 403) and "detail" in anonymous.json()
    Membership.objects.create(project_id=default_project_id(), user=lead2, role="lead")
    both = api.get("/api/batches/")
    assert both.status_code == 404
    assert set(both.json()["choices"]) == {"/p/phase-2/api/batches/", "/p/default/api/batches/"}


def test_a_user_of_two_projects_chooses(client, phase2, lead2):
    Membership.objects.create(project_id=default_project_id(), user=lead2, role="lead")
    client.force_login(lead2)
    choice = client.get("/label/lead/")
    assert choice.status_code == 300
    html = choice.content.decode()
    assert "/p/phase-2/label/lead/" in html and "/p/default/label/lead/" in html
    listing = client.get("/").content.decode()
    assert "Phase 2" in listing and "Default" in listing


@pytest.mark.parametrize("role", ["labeler", "lead", "researcher"])
def test_a_member_of_another_project_in_each_role_reads_nothing_of_this_one_in_the_api(
    client, phase2, role
):
    from labeling.models import Labeling
    from tests.factories import make_solution
    from tests.labeling.helpers import next_labeling

    make_solution(make_batch(gold_rate=0))
    labeling = next_labeling(make_user("lena", "labeler"))
    stranger = make_user("stranger", role, project=phase2)
    client.force_login(stranger)
    for path in ("/p/default/api/export/", "/p/default/api/", "/p/default/api/labelings/"):
        assert client.get(path).status_code == 404, path
    # Under their own project's link, this one's rows do not exist.
    assert client.get(f"/p/phase-2/api/labelings/{labeling.pk}/").status_code == 404
    assert Labeling.objects.count() == 1


def test_only_the_admin_creates_a_project_through_the_api(phase2, lead2):
    body = {"name": "MATH phase 3", "leads": ["lead2"]}
    assert api_client_for(lead2).post("/api/projects/", body, format="json").status_code == 403
    assert not Project.objects.filter(name="MATH phase 3").exists()
    admin = make_user("ada", "admin")
    answer = api_client_for(admin).post("/api/projects/", body, format="json")
    assert answer.status_code == 201 and answer.json()["slug"] == "math-phase-3"
    made = Project.objects.get(slug="math-phase-3")
    assert list(Membership.objects.filter(project=made).values_list("user__username", "role")) == [
        ("lead2", "lead")
    ]
    unknown = {"name": "Other", "leads": ["nobody"]}
    assert api_client_for(admin).post("/api/projects/", unknown, format="json").status_code == 400
    assert not Project.objects.filter(name="Other").exists()


def test_a_lead_adds_and_removes_members_of_his_project_only(client, phase2, lead2):
    lena = make_user("lena", "labeler")  # the Default project's
    client.force_login(lead2)
    url = project_reverse("phase-2", "labeling:member_change")
    client.post(url, {"username": "lena", "role": "labeler", "action": "add"})
    assert set(lena.memberships.values_list("project__slug", "role")) == {
        ("default", "labeler"),
        ("phase-2", "labeler"),
    }
    client.post(url, {"username": "lena", "role": "labeler", "action": "remove"})
    assert set(lena.memberships.values_list("project__slug", "role")) == {("default", "labeler")}
    # His own lead role stays; the Default project's members are not his to change.
    assert (
        client.post(url, {"username": "lead2", "role": "lead", "action": "remove"}).status_code
        == 400
    )
    assert lead2.memberships.filter(role="lead", project=phase2).exists()
    default_url = reverse("labeling:member_change")
    assert (
        client.post(
            default_url, {"username": "lena", "role": "labeler", "action": "remove"}
        ).status_code
        == 404
    )
    assert lena.memberships.filter(project__slug="default").exists()


def test_one_release_file_goes_into_two_projects_and_each_export_gives_it_back(shared_data, phase2):
    """Lines are unique per project, not per deployment: the file imports whole into each
    project, a second import into one adds nothing there, and each project's export is the
    file, byte for byte."""
    from labeling.models import Labeling
    from labeling.services.exporting import iter_prm800k_lines
    from tests.labeling.test_importing import samples_path

    path = samples_path(shared_data)
    call_command("import_prm800k", str(path), "--project", "default")
    call_command("import_prm800k", str(path), "--project", "phase-2")
    again = call_command_report("import_prm800k", str(path), "--project", "phase-2")
    assert "created nothing new; 6 already present" in again
    for project in (Project.objects.get(slug="default"), phase2):
        mine = Labeling.objects.filter(solution__project=project)
        assert mine.count() == 6
        lines = list(iter_prm800k_lines(mine))
        assert "".join(f"{line}\n" for line in lines) == path.read_text()
    assert Labeling.objects.count() == 12


def test_a_command_with_several_projects_asks_which_and_never_guesses(shared_data, phase2):
    from tests.labeling.test_importing import samples_path

    with pytest.raises(
        CommandError, match="Name the project with --project: one of default, phase-2"
    ):  # noqa: E501
        call_command("import_prm800k", str(samples_path(shared_data)))
    with pytest.raises(CommandError, match="There is no project 'nope'"):
        call_command("export_prm800k", "--output", "/dev/null", "--project", "nope")
    from labeling.models import Labeling

    assert not Labeling.objects.exists()  # nothing written either time


def call_command_report(*args: str) -> str:
    import io

    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()
