"""Forms of the modeling pages: a training run as a researcher types it (a few TrainConfig
fields, which labels, the gate), and a generation's parameters as a lead types them."""

from __future__ import annotations

import json
from typing import Any, cast

from django import forms
from django.conf import settings

from labeling.bounds import COUNT, INT32, ROW_ID, SEED
from labeling.models import Batch
from labeling.models.projects import in_project
from modeling import judges
from modeling.services import loop, prelabeling, runs
from modeling.training.backbones import SUGGESTED_SETTINGS
from modeling.training.config import LR_DEFAULTS, MODES, TrainConfig
from modeling.training.selection import MIX_RULES

ALL_DATA = "all"
NO_LABELINGS = "none"  # data files only
DATA_KINDS = {"batch": "batches", "generation": "generations"}  # "batch:3": {"batches": ["3"]}
_LR_HELP = (
    "Empty: the mode's default ("
    + ", ".join(f"{mode} {lr:g}" for mode, lr in LR_DEFAULTS.items())
    + ")."
)
_DEFAULTS = TrainConfig()
# The TrainConfig fields this form sets; the rest keep their defaults unless "other settings" says.
CONFIG_FIELDS = (
    "backbone",
    "mode",
    "epochs",
    "max_steps",
    "lr",
    "batch_tokens",
    "max_length",
    "backbone_layers",
)


def data_choices(project: Any = None) -> list[tuple[str, Any]]:
    """All completed labelings, or those of one batch, or of one generation: the project's
    (the Default project's where None is named)."""
    mine = Batch.objects.filter(**in_project(None if project is None else project.pk))
    batches = list(mine.order_by("-created_at").values_list("pk", "name", "generation")[:200])
    generations = sorted({g for _, _, g in batches if g is not None})
    choices: list[tuple[str, Any]] = [
        (ALL_DATA, "All completed labelings"),
        (NO_LABELINGS, "None: the data files only"),
    ]
    if generations:
        choices.append(
            ("Generation", [(f"generation:{g}", f"Generation {g}") for g in generations])
        )
    if batches:
        choices.append(("Batch", [(f"batch:{pk}", name) for pk, name, _ in batches]))
    return choices


def suggested_settings(backbone: str) -> dict[str, Any]:
    """README.md's suggested TrainConfig fields for a named backbone; TrainConfig's defaults for
    any other (a folder or a hub model)."""
    return dict(SUGGESTED_SETTINGS.get(backbone, {}))


class TrainingRunForm(forms.Form):
    name = forms.CharField(
        max_length=200, required=False, help_text="Shown in lists; the model is named after it."
    )
    objective = forms.ChoiceField(
        choices=[
            ("process", "process: step labels (a PRM)"),
            ("outcome", "outcome: final-answer correctness (an ORM)"),
        ],
        initial="process",
        required=False,  # empty: process, as before the field existed
        help_text="An outcome run trains on the graded solutions Stepwise holds (the pool, "
        "sampling runs, imported samples): the labels and data files below are a PRM's.",
    )
    backbone = forms.CharField(
        max_length=runs.MAX_BACKBONE_CHARS,
        initial=_DEFAULTS.backbone,
        help_text="A named offline backbone, a folder under the models root, or a model in the "
        "local Hugging Face cache.",
    )
    mode = forms.ChoiceField(choices=[(m, m) for m in MODES], initial=_DEFAULTS.mode)
    epochs = forms.FloatField(min_value=0.01, initial=_DEFAULTS.epochs)
    max_steps = forms.IntegerField(
        min_value=1, required=False, label="Max steps", help_text="Overrides epochs."
    )
    lr = forms.FloatField(
        min_value=1e-9,
        max_value=1.0,
        required=False,
        label="Learning rate",
        help_text=_LR_HELP,
        widget=forms.NumberInput(attrs={"placeholder": "mode default", "title": _LR_HELP}),
    )
    batch_tokens = forms.IntegerField(
        min_value=64, initial=_DEFAULTS.batch_tokens, label="Batch tokens"
    )
    max_length = forms.IntegerField(min_value=16, initial=_DEFAULTS.max_length, label="Max length")
    backbone_layers = forms.IntegerField(
        min_value=1, required=False, label="Backbone layers", help_text="Empty keeps all."
    )
    # Named as the API names it; the form metaclass moves fields off the class, so `self.data`
    # stays the bound data. A batch or generation past the list is not refused here: the
    # service checks the filters it becomes, with the API's messages (`runs.check_run_filters`).
    data = forms.CharField(label="Labels", widget=forms.Select)  # type: ignore[assignment]
    data_files = forms.CharField(
        required=False,
        label="Data files",
        widget=forms.Textarea(attrs={"rows": 2, "class": "mono"}),
        help_text="Also train on these files, one a line, under the data root "
        "(STEPWISE_DATA_ROOT): PRM800K, TRL stepwise supervision, Math-Shepherd or "
        "stepwise-critic, as JSONL, Parquet or a datasets folder.",
    )
    holdout_fraction = forms.FloatField(
        min_value=0,
        max_value=0.9,
        label="Held-out share",
        help_text="Problems kept out of training to measure the model on.",
    )
    activate = forms.BooleanField(required=False, initial=True, label="Activate if it passes")
    extra = forms.CharField(
        required=False,
        label="Other settings",
        widget=forms.Textarea(attrs={"rows": 2, "class": "mono"}),
        help_text='More TrainConfig fields as JSON, e.g. {"device": "cpu", "seed": 1}; TRL\'s '
        '2-class recipe: {"num_labels": 2, "step_separator": "\\n"}.',
    )

    def __init__(
        self, *args: Any, backbone: str | None = None, project: Any = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.Select, self.fields["data"].widget).choices = data_choices(project)
        self.fields["holdout_fraction"].initial = settings.STEPWISE_PRM_HOLDOUT_FRACTION
        self.suggested_for = backbone or _DEFAULTS.backbone
        self.has_suggestions = self.suggested_for in SUGGESTED_SETTINGS
        self.suggested_backbones = [n for n in SUGGESTED_SETTINGS if n != self.suggested_for]
        self._start_from(suggested_settings(self.suggested_for))

    def _start_from(self, suggested: dict[str, Any]) -> None:
        """The backbone's suggested settings as the fields' initial values (extra: the rest)."""
        self.fields["backbone"].initial = self.suggested_for
        rest = {}
        for name, value in suggested.items():
            if name in CONFIG_FIELDS:
                self.fields[name].initial = value
            else:
                rest[name] = value
        self.fields["extra"].initial = json.dumps(rest) if rest else ""

    def clean_backbone(self) -> str:
        try:
            return runs.allowed_backbone(self.cleaned_data["backbone"])
        except runs.RunError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_extra(self) -> dict[str, Any]:
        text = self.cleaned_data["extra"].strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise forms.ValidationError('a JSON object, like {"seed": 1}')
        return value

    def clean_data(self) -> str:
        value = self.cleaned_data["data"]
        kind, colon, _ = value.partition(":")
        if value not in (ALL_DATA, NO_LABELINGS) and not (colon and kind in DATA_KINDS):
            raise forms.ValidationError("Choose the labels from the list.")
        return value

    def clean_data_files(self) -> list[str]:
        """Each line a file or datasets folder under the data root, checked as the API checks
        them (`runs.data_root_path`)."""
        paths = [line.strip() for line in self.cleaned_data["data_files"].splitlines()]
        try:
            return [
                runs.data_root_path(path, what="Data files", folders=True) for path in paths if path
            ]
        except runs.RunError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if data.get("data") == NO_LABELINGS and "data_files" in data and not data["data_files"]:
            self.add_error("data_files", "With no labelings, name at least one data file.")
        return data

    def use_labelings(self) -> bool:
        return self.cleaned_data["data"] != NO_LABELINGS

    def config(self) -> dict[str, Any]:
        """The TrainConfig overrides; the service checks them (unknown fields, bad values)."""
        data = self.cleaned_data
        # "Other settings" come first so the named fields above them win.
        named = {name: data[name] for name in CONFIG_FIELDS}
        if named["lr"] is None:  # empty: "other settings" or the mode's default
            del named["lr"]
        return {**data["extra"], **named, "objective": data["objective"]}

    def clean_objective(self) -> str:
        return self.cleaned_data["objective"] or "process"

    def is_outcome(self) -> bool:
        return self.cleaned_data["objective"] == "outcome"

    def filters(self) -> dict[str, Any]:
        """ExportFilters fields for the chosen labels, the number as sent: the service checks
        them as it does the API's. An outcome run has none (it trains on graded solutions)."""
        if self.is_outcome():
            return {}
        kind, _, value = self.cleaned_data["data"].partition(":")
        return {DATA_KINDS[kind]: [value]} if kind in DATA_KINDS else {}


RULE_CHOICES = [
    ("convincing_wrong", "Convincing wrong answers (the paper's)"),
    ("uncertainty", "Uncertainty: ensemble disagreement"),
    ("disagreement", "Judge disagreement (routing)"),
    ("mix", "Mix of rules, by shares"),
    ("uniform", "Uniform at random (the baseline)"),
]


class GenerationForm(forms.Form):
    rule = forms.ChoiceField(
        choices=RULE_CHOICES,
        initial="convincing_wrong",
        required=False,  # empty: the paper's rule
        label="Selection rule",
        help_text="Uncertainty fits an ensemble of heads on the model's frozen features: head "
        "mode only (a few seconds to minutes); in lora or full mode it would take one training "
        "per head, so it is refused there. Routing ranks by how much the judges' pre-labels "
        "(prm, llm, mc) and the PRM disagree, first-error positions counting: pre-label the "
        "pool first.",
    )
    share_convincing_wrong = forms.FloatField(
        min_value=0, max_value=1, required=False, label="Mix: convincing wrong share"
    )
    share_uncertainty = forms.FloatField(
        min_value=0, max_value=1, required=False, label="Mix: uncertainty share"
    )
    share_uniform = forms.FloatField(
        min_value=0, max_value=1, required=False, label="Mix: uniform share"
    )
    ensemble_heads = forms.IntegerField(
        min_value=2,
        max_value=32,
        required=False,
        label="Ensemble heads",
        help_text="Uncertainty only. Empty: the server's setting.",
    )
    k = forms.IntegerField(min_value=1, max_value=100_000, initial=50, label="Solutions (K)")
    convincing_wrong_fraction = forms.FloatField(
        min_value=0, max_value=1, initial=0.8, label="Convincing wrong share"
    )
    per_problem_cap = forms.IntegerField(
        validators=[COUNT], required=False, initial=2, label="Cap per problem"
    )
    scope = forms.ChoiceField(choices=[("pool", "across the pool"), ("per_problem", "per problem")])
    per_problem_k = forms.IntegerField(validators=[COUNT], required=False, label="Per problem K")
    overlap = forms.IntegerField(
        min_value=1, max_value=10, initial=1, label="Labelings per solution"
    )
    retrain = forms.BooleanField(required=False, initial=True, label="Retrain first")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["ensemble_heads"].widget.attrs["placeholder"] = str(
            settings.STEPWISE_ENSEMBLE_HEADS
        )

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if data.get("scope") == "per_problem" and not data.get("per_problem_k"):
            self.add_error("per_problem_k", "Scope 'per problem' needs a per-problem K.")
        rule = data["rule"] = data.get("rule") or "convincing_wrong"
        if rule == "mix":
            shares = {
                name: data[f"share_{name}"]
                for name in MIX_RULES
                if data.get(f"share_{name}") is not None
            }
            try:
                data["shares"] = loop.check_rule(rule, shares)
            except loop.BadParameters as exc:
                self.add_error(None, f"Mix shares: {exc}.")
        else:
            data["shares"] = None
        if rule and rule != "convincing_wrong" and data.get("scope") == "per_problem":
            self.add_error("scope", "Scope 'per problem' applies to convincing wrong answers only.")
        return data

    def params(self) -> dict[str, Any]:
        return {
            name: value
            for name, value in self.cleaned_data.items()
            if not name.startswith("share_")
        }


class EvaluationSetForm(forms.Form):
    """Create or renew the frozen evaluation set: a share or a count of the unseen problems."""

    share = forms.FloatField(
        min_value=0.0001,
        max_value=1,
        required=False,
        label="Share of problems",
        help_text="Of the problems with completed labelings that no run has used.",
    )
    count = forms.IntegerField(validators=[COUNT], required=False, label="Or a count of problems")
    seed = forms.IntegerField(initial=0, validators=[INT32], label="Seed")

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if (data.get("share") is None) == (data.get("count") is None) and not self.errors:
            raise forms.ValidationError("Give either a share or a count of problems.")
        return data


class SamplingForm(forms.Form):
    """generate_pool from the page: N samples for the chosen problems."""

    # Small by default: the embedded default's local SmolLM2 on a CPU takes minutes per sample.
    samples = forms.IntegerField(min_value=1, max_value=64, initial=2, label="Samples per problem")
    limit = forms.IntegerField(
        validators=[COUNT], required=False, initial=3, label="At most … problems"
    )
    subject = forms.CharField(required=False, max_length=64, label="Subject")
    level = forms.IntegerField(min_value=1, max_value=5, required=False, label="Level")
    batch = forms.IntegerField(validators=[ROW_ID], required=False, label="Problems of batch (id)")
    max_tokens = forms.IntegerField(
        min_value=1, max_value=8192, required=False, label="Max tokens per solution"
    )
    temperature = forms.FloatField(min_value=0, max_value=2, required=False, label="Temperature")
    seed = forms.IntegerField(validators=[SEED], required=False, label="Seed")

    def params(self) -> dict:
        data = self.cleaned_data
        return {
            "samples": data["samples"],
            "limit": data.get("limit"),
            "subject": data.get("subject") or None,
            "level": data.get("level"),
            "batch_id": data.get("batch"),
            "max_tokens": data.get("max_tokens"),
            "temperature": data.get("temperature"),
            "seed": data.get("seed"),
        }


class BestOfNForm(forms.Form):
    """A best-of-N comparison as a researcher types it; the service checks the ids and paths."""

    models = forms.CharField(
        max_length=200,
        label="Model versions",
        help_text="Ids, comma-separated (e.g. the active PRM's and an ORM's).",
    )
    sampling_run = forms.IntegerField(validators=[ROW_ID], required=False, label="Sampling run")
    input = forms.CharField(
        max_length=1000,
        required=False,
        label="Or a server file",
        help_text="Under the data root (STEPWISE_DATA_ROOT), as read_best_of_n reads it.",
    )
    file = forms.FileField(required=False, label="Or upload one")
    ns = forms.CharField(
        max_length=200, required=False, label="N", help_text="Empty: 1, 2, 4, ... (e.g. 1,4,16)."
    )
    allow_mismatch = forms.BooleanField(
        required=False,
        label="Compare even if the models are not on equal footing",
    )

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if data.get("file") is not None and (data.get("input") or "").strip():
            self.add_error("file", "Upload a file or name one under the data root, not both.")
        return data

    def clean_models(self) -> list[str]:
        return [part.strip() for part in self.cleaned_data["models"].split(",") if part.strip()]

    def clean_ns(self) -> list[int]:
        parts = [p.strip() for p in self.cleaned_data["ns"].split(",") if p.strip()]
        if not all(p.isdigit() and len(p) <= 9 for p in parts):
            raise forms.ValidationError("Whole numbers, comma-separated.")
        return [int(p) for p in parts]


class PrelabelForm(forms.Form):
    """A pre-label run from the page: a judge over a batch, with its budget. The llm critic's
    template is a lead's to edit (stored with the run); it is refused without its placeholders."""

    batch = forms.ModelChoiceField(queryset=Batch.objects.order_by("name"), label="Batch")
    judge = forms.ChoiceField(choices=[(kind, kind) for kind in judges.KINDS], label="Judge")
    model_version = forms.IntegerField(
        validators=[ROW_ID], required=False, label="prm: model version id (default: active)"
    )
    k = forms.IntegerField(min_value=1, max_value=64, required=False, label="mc: k per step")
    max_steps = forms.IntegerField(
        min_value=1, max_value=200, required=False, label="mc: max steps per solution"
    )
    max_solutions = forms.IntegerField(
        min_value=1, max_value=100_000, required=False, label="Max solutions"
    )
    template = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8}),
        required=False,
        max_length=judges.MAX_TEMPLATE_CHARS,
        initial=judges.CRITIC_TEMPLATE,
        label="llm: critic template ({problem} and {steps} required; leads only)",
    )

    def __init__(
        self, *args: Any, may_edit_template: bool = False, project: Any = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.may_edit_template = may_edit_template
        if project is not None:  # the page's project's batches only
            field = self.fields["batch"]
            assert isinstance(field, forms.ModelChoiceField)
            field.queryset = Batch.objects.filter(project=project).order_by("name")

    def clean_template(self) -> str:
        template = self.cleaned_data.get("template") or ""
        if not template.strip() or template.replace("\r\n", "\n") == judges.CRITIC_TEMPLATE:
            return ""  # the default
        template = template.replace("\r\n", "\n")
        if not self.may_edit_template:
            raise forms.ValidationError("Only a lead may change the critic template.")
        try:
            return judges.check_template(template)
        except judges.TemplateError as exc:
            raise forms.ValidationError(str(exc)) from None

    def options(self) -> dict[str, Any]:
        """What the chosen judge takes of the form (the others' fields ignored)."""
        data = self.cleaned_data
        taken = prelabeling.OPTIONS[data["judge"]]
        return {
            name: data.get(name)
            for name in ("model_version", "k", "max_steps", "max_solutions", "template")
            if name in taken and data.get(name) not in (None, "")
        }
