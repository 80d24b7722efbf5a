"""Forms parse and validate; services do the writing."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from itertools import groupby
from typing import Any, cast

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.validators import ASCIIUsernameValidator

from labeling.bounds import COUNT, ROW_ID
from labeling.models import (
    Batch,
    FinishReason,
    Guidelines,
    Labeling,
    Membership,
    PreLabel,
    default_project_id,
)
from labeling.roles import LABELER
from labeling.selectors import ItemFilters, ItemState
from labeling.services.batches import prelabel_refusal


class IdsChoiceField(forms.ModelMultipleChoiceField):
    """Ids past the id column's range are refused before the query (SQLite's driver raises)."""

    def _check_values(self, value):
        for pk in value:
            try:
                number = int(pk)
            except (TypeError, ValueError):
                continue  # Django's own check names what is not an id
            ROW_ID(number)
        return super()._check_values(value)  # type: ignore[misc]  # private in the stubs


class IdChoiceField(forms.ModelChoiceField):
    """One id, refused past the id column's range before the query (as IdsChoiceField)."""

    def to_python(self, value):
        try:
            ROW_ID(int(value))
        except (TypeError, ValueError):
            pass  # Django's own check names what is not an id
        return super().to_python(value)


RANGE_MAX_IDS = 10_000  # the longest range the problems field takes


def id_ranges(ids: Iterable[int]) -> str:
    """Ids as the problems field reads them: "1-3, 7" (a longer run than a range may hold is
    split)."""
    parts = []
    ordered = sorted(set(ids))
    for _, pairs in groupby(enumerate(ordered), key=lambda pair: pair[1] - pair[0]):
        run = [problem_id for _, problem_id in pairs]
        for start in range(0, len(run), RANGE_MAX_IDS):
            first, last = run[start], run[start : start + RANGE_MAX_IDS][-1]
            parts.append(str(first) if first == last else f"{first}-{last}")
    return ", ".join(parts)


class BatchForm(forms.ModelForm):
    labelers = IdsChoiceField(
        queryset=get_user_model().objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every labeler may work on this batch.",
    )
    take_from = forms.ModelChoiceField(
        queryset=Batch.objects.none(),
        required=False,
        label="Take unlabeled solutions from batch",
    )
    take_limit = forms.IntegerField(
        required=False, validators=[COUNT], label="How many (empty: all)"
    )
    upload = forms.FileField(
        required=False,
        label="Or upload generator samples (JSONL, as `import_samples`)",
    )
    prelabel_judge = forms.ChoiceField(
        choices=[("", "none"), *PreLabel.Kind.choices],
        required=False,
        label="Pre-label judge",
        help_text="Suggest mode shows this judge's latest labels (run it first: "
        "`manage.py prelabel`).",
    )
    problems = forms.CharField(
        required=False,
        label="Problems to label step by step (alternatives protocol)",
        help_text="Problem ids and ranges, e.g. 1-20, 35: each becomes a solution the "
        "labelers build from the model's candidate steps. The problems the batch holds are "
        "listed and stay; add ids to add problems.",
    )

    class Meta:
        model = Batch
        fields = [
            "name",
            "generation",
            "overlap",
            "priority",
            "is_active",
            "gold_rate",
            "lease_seconds_min",
            "lease_seconds_max",
            "protocol",
            "alternatives_k",
            "alternatives_after_error",
            "prelabel_mode",
            "prelabel_judge",
            "labelers",
        ]
        help_texts = {
            "gold_rate": "Share of claims served a gold solution; empty: the site default.",
            "lease_seconds_min": "Lease floor in seconds; empty: the site default.",
            "lease_seconds_max": "Lease ceiling in seconds; empty: the site default.",
        }

    def __init__(self, *args, project: Any = None, **kwargs):
        super().__init__(*args, **kwargs)
        # The project's labelers and batches only (the batch's own project when editing).
        project_id = self.instance.project_id if self.instance.pk else getattr(project, "pk", None)
        if project_id is None:
            project_id = default_project_id()
        members = Membership.objects.filter(project_id=project_id, role=LABELER)
        users = (
            get_user_model()
            .objects.filter(pk__in=members.values("user_id"))
            .order_by("username")
            .distinct()
        )
        cast(forms.ModelMultipleChoiceField, self.fields["labelers"]).queryset = users
        others = Batch.objects.filter(project_id=project_id).order_by("name")
        if self.instance.pk:
            others = others.exclude(pk=self.instance.pk)
        cast(forms.ModelChoiceField, self.fields["take_from"]).queryset = others
        # Left out of a form (older clients, scripts): the batch keeps what it has.
        self.fields["protocol"].required = False
        self.fields["alternatives_k"].required = False
        self.fields["prelabel_mode"].required = False
        # A step-by-step batch's problems, listed in its field; the lead adds ids to the list.
        self.held_problems: set[int] = set()
        if self.instance.pk and self.instance.protocol == Batch.Protocol.ALTERNATIVES:
            self.held_problems = set(self.instance.solutions.values_list("problem_id", flat=True))
            self.fields["problems"].initial = id_ranges(self.held_problems)

    def clean_problems(self) -> list[int]:
        """The problems to add: those listed that the batch does not hold yet."""
        if "problems" not in self.data:  # left out (a script): nothing added, nothing taken out
            return []
        ids: list[int] = []
        for part in filter(None, (p.strip() for p in self.cleaned_data["problems"].split(","))):
            low, _, high = part.partition("-")
            try:
                first, last = int(low), int(high or low)
            except ValueError:
                raise forms.ValidationError(
                    f"“{part}” is not an id or a range like 1-20."
                ) from None
            if first > last or last - first >= RANGE_MAX_IDS:
                raise forms.ValidationError(f"“{part}” is not a range of at most 10,000 ids.")
            ROW_ID(first)
            ROW_ID(last)
            ids.extend(range(first, last + 1))
        left_out = self.held_problems.difference(ids)
        if left_out:
            raise forms.ValidationError(
                f"A problem stays in the batch once added: keep {id_ranges(left_out)} in the list."
            )
        return sorted(set(ids) - self.held_problems)

    def clean_prelabel_mode(self) -> str:
        return self.cleaned_data.get("prelabel_mode") or self.instance.prelabel_mode

    def clean_prelabel_judge(self) -> str:
        if "prelabel_judge" not in self.data:  # left out (a script): kept as it is
            return self.instance.prelabel_judge
        return self.cleaned_data.get("prelabel_judge") or ""

    def clean_protocol(self) -> str:
        return self.cleaned_data.get("protocol") or self.instance.protocol

    def clean_alternatives_k(self) -> int:
        k = self.cleaned_data.get("alternatives_k")
        if k is None:
            return self.instance.alternatives_k
        if not 1 <= k <= 16:
            raise forms.ValidationError("Between 1 and 16 candidates per step.")
        return k

    def clean(self) -> dict:
        super().clean()
        data = self.cleaned_data
        alternatives = data.get("protocol") == Batch.Protocol.ALTERNATIVES
        if alternatives and (data.get("take_from") or data.get("upload")):
            raise forms.ValidationError(
                "A batch with the alternatives protocol takes problems, not finished solutions."
            )
        if data.get("problems") and not alternatives:
            self.add_error(
                "problems", "Only a batch with the alternatives protocol takes problems."
            )
        refusal = prelabel_refusal(
            data.get("prelabel_mode") or "", data.get("prelabel_judge") or ""
        )
        if refusal and "prelabel_mode" not in self.errors:
            self.add_error("prelabel_judge", refusal)
        # The instance still has its saved values here (the form writes them after clean).
        changed = self.instance.pk and data.get("protocol") != self.instance.protocol
        if changed and self.instance.solutions.exists():
            self.add_error("protocol", "The protocol of a batch that has solutions stays as it is.")
        return data

    def clean_overlap(self) -> int:
        overlap = self.cleaned_data["overlap"]
        if not 1 <= overlap <= 20:
            raise forms.ValidationError("Between 1 and 20 labels per solution.")
        return overlap

    def clean_gold_rate(self) -> float | None:
        rate = self.cleaned_data.get("gold_rate")
        if rate is not None and not 0 <= rate <= 1:
            raise forms.ValidationError("A share between 0 and 1.")
        return rate


class GuidelinesForm(forms.ModelForm):
    class Meta:
        model = Guidelines
        fields = ["text"]
        widgets = {"text": forms.Textarea(attrs={"rows": 28, "class": "mono"})}


class ApiTokenForm(forms.Form):
    EXPIRES = {"7": 7, "30": 30, "90": 90, "365": 365, "never": None}

    name = forms.CharField(
        max_length=100,
        label="Name",
        help_text="What the token is for, e.g. “nightly export”.",
    )
    expires = forms.ChoiceField(
        label="Expires",
        initial="90",
        choices=[
            ("7", "in 7 days"),
            ("30", "in 30 days"),
            ("90", "in 90 days"),
            ("365", "in a year"),
            ("never", "never"),
        ],
    )

    def expires_in(self) -> timedelta | None:
        days = self.EXPIRES[self.cleaned_data["expires"]]
        return None if days is None else timedelta(days=days)


ANY = [("", "any")]
YES_NO = [*ANY, ("yes", "yes"), ("no", "no")]


class ItemFilterForm(forms.Form):
    """The item browser's filters, from the query string; an unknown value is an error shown
    on the form (the list then shows nothing rather than everything)."""

    q = forms.CharField(required=False, max_length=200, label="Problem text")
    state = forms.ChoiceField(required=False, choices=[*ANY, *ItemState.CHOICES])
    finish_reason = forms.ChoiceField(
        required=False, choices=[*ANY, *FinishReason.choices], label="Finish reason"
    )
    labeler = IdChoiceField(queryset=get_user_model().objects.none(), required=False)
    agreement = forms.ChoiceField(
        required=False,
        choices=[
            *ANY,
            ("disagree", "labelers disagree"),
            ("agree", "labelers agree"),
            ("none", "not computed"),
        ],
    )
    flagged = forms.ChoiceField(required=False, choices=YES_NO, label="Flagged step")
    gold = forms.ChoiceField(required=False, choices=YES_NO)
    notes = forms.ChoiceField(required=False, choices=YES_NO)
    model = forms.ChoiceField(
        required=False, choices=[*ANY, ("disagree", "disagrees with a labeler")], label="Model"
    )

    def __init__(self, *args, batch: Batch, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Who labeled in this batch: not every account with a labeler record (an admin who once
        # opened the queue, the importer's accounts for another batch's PRM800K labels).
        field = cast(forms.ModelChoiceField, self.fields["labeler"])
        field.queryset = (
            get_user_model()
            .objects.filter(pk__in=Labeling.objects.filter(solution__batch=batch).values("labeler"))
            .order_by("username")
        )
        field.empty_label = "any"

    def filters(self) -> ItemFilters:
        data = self.cleaned_data
        labeler = data.get("labeler")
        return ItemFilters(
            q=data.get("q", ""),
            state=data.get("state", ""),
            finish_reason=data.get("finish_reason", ""),
            labeler_id=labeler.pk if labeler else None,
            agreement=data.get("agreement", ""),
            flagged=data.get("flagged", ""),
            gold=data.get("gold", ""),
            notes=data.get("notes", ""),
            model=data.get("model", ""),
        )


SIGN_IN_METHODS = [
    ("link", "a one-time sign-in link (they choose their password)"),
    ("password", "a temporary password"),
]


class LabelerAddForm(forms.Form):
    """A new labeler account: the name they sign in with, and how they first sign in."""

    username = forms.CharField(
        max_length=150,
        label="Username",
        # ASCII only: a look-alike letter from another script ("аdmin") is refused.
        validators=[ASCIIUsernameValidator()],
        help_text="Letters a-z and A-Z (no accents), digits and @ . + - _ only.",
    )
    email = forms.EmailField(required=False, label="Email (optional)")
    method = forms.ChoiceField(
        label="They sign in with", choices=SIGN_IN_METHODS, initial="link", widget=forms.RadioSelect
    )


class PasswordResetChoiceForm(forms.Form):
    method = forms.ChoiceField(choices=SIGN_IN_METHODS)


class SignInForm(AuthenticationForm):
    """Django's sign-in form, its errors in the app's words. "inactive" is said only to someone who
    typed the account's right password (stepwise.sessions.ModelBackend)."""

    error_messages = {
        "invalid_login": "Your username and password didn't match. Please try again.",
        "inactive": "This account is deactivated: ask your project lead to reactivate it.",
    }


class MachineLabelsForm(forms.Form):
    """A lead's machine-label settings for one batch (issue 47), and "accept now"."""

    enabled = forms.BooleanField(required=False, label="Accept machine labels")
    min_confidence = forms.FloatField(
        min_value=0,
        max_value=1,
        label="Minimum confidence",
        help_text="Every judge's score on every step at least this.",
    )
    audit_share = forms.FloatField(
        min_value=0, max_value=1, label="Audit share", help_text="Still labeled by humans."
    )
    audit_seed = forms.IntegerField(
        min_value=-(2**31), max_value=2**31 - 1, label="Audit seed", initial=0
    )
    accept = forms.BooleanField(required=False, label="Accept the agreeing solutions now")

    @classmethod
    def for_batch(cls, batch: Batch, data=None) -> MachineLabelsForm:
        return cls(
            data,
            initial={
                "enabled": batch.machine_labels,
                "min_confidence": batch.machine_min_confidence,
                "audit_share": batch.machine_audit_share,
                "audit_seed": batch.machine_audit_seed,
            },
        )
