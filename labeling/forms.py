"""Forms parse and validate; services do the writing."""

from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model

from labeling.models import Batch, Guidelines
from labeling.roles import LABELER


class BatchForm(forms.ModelForm):
    labelers = forms.ModelMultipleChoiceField(
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
    take_limit = forms.IntegerField(required=False, min_value=1, label="How many (empty: all)")
    upload = forms.FileField(
        required=False,
        label="Or upload generator samples (JSONL, as `import_samples`)",
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
            "labelers",
        ]
        help_texts = {
            "gold_rate": "Share of claims served a gold solution; empty: the site default.",
            "lease_seconds_min": "Lease floor in seconds; empty: the site default.",
            "lease_seconds_max": "Lease ceiling in seconds; empty: the site default.",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        users = (
            get_user_model().objects.filter(groups__name=LABELER).order_by("username").distinct()
        )
        self.fields["labelers"].queryset = users
        others = Batch.objects.order_by("name")
        if self.instance.pk:
            others = others.exclude(pk=self.instance.pk)
        self.fields["take_from"].queryset = others

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
