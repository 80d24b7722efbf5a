"""Guidelines: a preview (the text as labelers see it, and what changes) before publishing, and
what each version changed from the one before."""

from __future__ import annotations

import pytest
from django.urls import reverse

from labeling import selectors
from labeling.models import Guidelines
from labeling.services import batches
from labeling.services.errors import LabelingError

pytestmark = pytest.mark.django_db

V1 = "# Ratings\n- +1: correct\n- 0: neutral\n- -1: wrong\n\n# Flags\nFlag when unsure."
V2 = "# Ratings\n- +1: correct and helpful\n- 0: neutral\n- -1: wrong\n\n# Flags\nFlag when unsure."


def test_text_diff_marks_added_and_removed_lines_with_context():
    diff = selectors.text_diff("a\nb\nc\nd\ne\nf\ng\nh", "a\nB\nc\nd\ne\nf\ng\nh\ni", context=1)
    assert [(line.kind, line.text) for line in diff] == [
        ("same", "a"),
        ("remove", "b"),
        ("add", "B"),
        ("same", "c"),
        ("gap", ""),
        ("same", "h"),
        ("add", "i"),
    ]
    assert selectors.text_diff("same", "same") == []


def test_a_version_shows_what_it_changed_from_the_one_before(lead):
    batches.guidelines_save(text=V1, user=lead)
    batches.guidelines_save(text=V2, user=lead)
    change = selectors.guidelines_change(2)
    assert change is not None and change.previous_version == 1
    assert [(d.kind, d.text) for d in change.diff if d.kind != "same"] == [
        ("remove", "- +1: correct"),
        ("add", "- +1: correct and helpful"),
    ]
    first = selectors.guidelines_change(1)
    assert first is not None and first.previous_version is None  # against the default text
    assert selectors.guidelines_change(3) is None


def test_publishing_the_current_text_again_is_refused(lead):
    batches.guidelines_save(text=V1, user=lead)
    with pytest.raises(LabelingError, match="version 1's text: nothing to publish"):
        batches.guidelines_save(text=V1, user=lead)
    assert Guidelines.objects.count() == 1


def test_preview_shows_the_change_and_the_text_and_saves_nothing(client, lead):
    batches.guidelines_save(text=V1, user=lead)
    client.force_login(lead)
    url = reverse("labeling:guidelines_edit")
    response = client.post(url, {"text": V2, "action": "preview"})
    page = response.content.decode()
    assert response.status_code == 200
    assert "<del" in page and "- +1: correct</del>" in page
    assert "- +1: correct and helpful</ins>" in page
    assert 'id="publish"' in page and "Publish as version 2" in page
    assert "<h2>Ratings</h2>" in page  # the text as labelers see it
    assert Guidelines.objects.count() == 1
    published = client.post(url, {"text": V2, "action": "publish"})
    assert published["Location"] == reverse("labeling:guidelines")
    assert Guidelines.objects.order_by("-version").first().text == V2


def test_the_diff_and_preview_escape_the_text(client, lead):
    client.force_login(lead)
    hostile = "# Ratings\n<script>alert(1)</script>\n- <b>bold</b>"
    page = client.post(
        reverse("labeling:guidelines_edit"), {"text": hostile, "action": "preview"}
    ).content.decode()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    batches.guidelines_save(text=hostile, user=lead)
    version = client.get(reverse("labeling:guidelines_version", args=[1])).content.decode()
    assert "<script>alert(1)</script>" not in version and "&lt;b&gt;bold&lt;/b&gt;" in version


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"text": "", "action": "preview"}, "This field is required"),
        ({"text": "   ", "action": "publish"}, "This field is required"),
        ({"text": V1, "action": "publish"}, "nothing to publish"),
    ],
)
def test_bad_guidelines_input_is_a_clear_400(client, lead, data, message):
    batches.guidelines_save(text=V1, user=lead)
    client.force_login(lead)
    response = client.post(reverse("labeling:guidelines_edit"), data)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert Guidelines.objects.count() == 1


def test_a_double_publish_adds_one_version(client, lead):
    batches.guidelines_save(text=V1, user=lead)
    client.force_login(lead)
    url = reverse("labeling:guidelines_edit")
    assert client.post(url, {"text": V2, "action": "publish"}).status_code == 302
    again = client.post(url, {"text": V2, "action": "publish"})
    assert again.status_code == 400
    assert list(Guidelines.objects.values_list("version", flat=True).order_by("version")) == [1, 2]


def test_every_signed_in_user_sees_what_a_version_changed(client, lead, labeler):
    batches.guidelines_save(text=V1, user=lead)
    batches.guidelines_save(text=V2, user=lead)
    client.force_login(labeler)
    current = client.get(reverse("labeling:guidelines")).content.decode()
    assert reverse("labeling:guidelines_version", args=[2]) in current
    page = client.get(reverse("labeling:guidelines_version", args=[2]))
    assert page.status_code == 200
    assert "What changed from version 1" in page.content.decode()
    assert client.get(reverse("labeling:guidelines_version", args=[7])).status_code == 404
    assert client.post(reverse("labeling:guidelines_edit"), {"text": "x"}).status_code == 403
