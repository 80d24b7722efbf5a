"""Parameters of a generation, as a lead types them."""

from __future__ import annotations

from typing import Any

from django import forms


class GenerationForm(forms.Form):
    k = forms.IntegerField(min_value=1, max_value=100_000, initial=50, label="Solutions (K)")
    convincing_wrong_fraction = forms.FloatField(
        min_value=0, max_value=1, initial=0.8, label="Convincing wrong share"
    )
    per_problem_cap = forms.IntegerField(
        min_value=1, required=False, initial=2, label="Cap per problem"
    )
    scope = forms.ChoiceField(choices=[("pool", "across the pool"), ("per_problem", "per problem")])
    per_problem_k = forms.IntegerField(min_value=1, required=False, label="Per problem K")
    overlap = forms.IntegerField(
        min_value=1, max_value=10, initial=1, label="Labelings per solution"
    )
    retrain = forms.BooleanField(required=False, initial=True, label="Retrain first")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("scope") == "per_problem" and not data.get("per_problem_k"):
            self.add_error("per_problem_k", "Scope 'per problem' needs a per-problem K.")
        return data

    def params(self) -> dict[str, Any]:
        return {name: value for name, value in self.cleaned_data.items()}
