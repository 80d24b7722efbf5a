"""Bring your own PRM: a TRL token classifier or a Math-Shepherd step-tag LM, imported (command
and API), scored, gated on the evaluation set, activated, and used by the review page and by
the next run's gate."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from labeling.models import Solution
from labeling.services.importing import import_prm800k
from modeling import selectors
from modeling.models import EvaluationSet, ModelVersion, SolutionScore
from modeling.services import execution, runs, scoring
from modeling.services.evaluation_sets import create_evaluation_set
from tests.factories import make_batch, make_solution
from tests.modeling.loop_helpers import make_tiny_backbone, tiny_train_config
from tests.modeling.test_review import labeled


def _tiny_llama_config(tokenizer, **extra):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id,
        **extra,
    )


def save_token_classifier(folder: Path, labels: int = 2, separator: str | None = None) -> Path:
    """A random Llama token classifier as TRL's PRMTrainer saves one (2 labels), or as our HF
    export does (3 labels -1/0/+1, config.json's step_separator)."""
    import torch
    from transformers import LlamaForTokenClassification

    from tests.helpers.tiny_models import build_tokenizer

    tokenizer = build_tokenizer()
    extra: dict = {"num_labels": labels}
    if labels == 3:
        extra = {"id2label": {0: "-1", 1: "0", 2: "+1"}, "label2id": {"-1": 0, "0": 1, "+1": 2}}
    if labels == 4:
        extra = {"num_labels": 4}
    config = _tiny_llama_config(tokenizer, **extra)
    if separator is not None:
        config.step_separator = separator
    torch.manual_seed(0)
    LlamaForTokenClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_step_tag_lm(folder: Path) -> Path:
    import torch
    from transformers import LlamaForCausalLM

    from tests.helpers.tiny_models import build_tokenizer

    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    LlamaForCausalLM(_tiny_llama_config(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def media(settings, tmp_path) -> Path:
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.STEPWISE_MODELS_ROOT = tmp_path / "models-root"
    settings.STEPWISE_MODELS_ROOT.mkdir()
    return settings.MEDIA_ROOT


@pytest.fixture
def labels(db, shared_data):
    import_prm800k(shared_data / "prm800k" / "samples.jsonl")


def imported_folders(media: Path) -> list[Path]:
    return sorted((media / "models").glob("*")) if (media / "models").exists() else []


def test_a_trl_token_classifier_is_imported_gated_activated_and_gates_the_next_run(
    media, labels, tmp_path, open_evaluation_gate
):
    evaluation_set = create_evaluation_set(count=3, seed=0)
    source = save_token_classifier(tmp_path / "trl-prm")
    out = io.StringIO()

    call_command("import_prm", str(source), "--activate", "--step-separator", "\\n", stdout=out)

    version = ModelVersion.objects.get()
    assert version.kind == ModelVersion.Kind.TOKEN_CLASSIFICATION and version.run is None
    assert version.source == str(source) and version.is_active and version.passed_evaluation
    folder = Path(version.artifact_path)
    assert folder.parent == media / "models" and (folder / "model.safetensors").exists()
    manifest = json.loads((folder / "external.json").read_text())
    assert manifest["labels"] == 2 and manifest["step_separator"] == "\n"  # given, as typed
    assert manifest["step_separator_from"] == "given"
    on_set = version.metrics["evaluation_set"]
    assert on_set["version"] == evaluation_set.version and on_set["new_auroc"] is not None
    assert version.metrics["gate"]["passed"] and "now active" in out.getvalue()

    written = scoring.score_solutions_with(model_version=version, solutions=Solution.objects.all())
    scores = SolutionScore.objects.filter(model_version=version)
    assert written == Solution.objects.count() == scores.count()
    for score in scores:  # 2 labels: P(-1) = 1 - P(good), P(0) = 0
        assert all(p[1] == 0 and abs(p[0] + p[2] - 1) < 1e-5 for p in score.step_probs)

    # A model trained here is gated against the imported one, both scored on the set.
    run = runs.create_training_run(config=tiny_train_config(make_tiny_backbone(tmp_path / "b")))
    trained = execution.execute_training_run(run.pk)
    run.refresh_from_db()
    on_set = run.metrics["evaluation_set"]
    assert on_set["active_model"] == version.pk and "active_error" not in on_set
    assert on_set["active_auroc"] == pytest.approx(version.metrics["evaluation_set"]["new_auroc"])
    assert trained.is_active and trained.kind == ModelVersion.Kind.TRAINED


def test_an_import_with_no_evaluation_set_makes_one_and_is_gated_on_it_beside_the_active(
    media, labels, tmp_path, settings
):
    settings.STEPWISE_PRM_EVAL_MIN_AUROC = 0.01
    settings.STEPWISE_PRM_EVAL_MAX_REGRESSION = 1.0
    settings.STEPWISE_EVAL_SET_PROBLEMS = 3  # of the sample's 6 problems, none in a run's data
    first = save_token_classifier(tmp_path / "first")
    call_command(
        "import_prm", str(first), "--name", "first", "--step-separator", "\\n",
        stdout=io.StringIO(),
    )  # fmt: skip
    active = ModelVersion.objects.get(name="first")
    evaluation_set = EvaluationSet.objects.get()  # made by the import, as a run's would be
    assert active.metrics["evaluation_set"]["id"] == evaluation_set.pk
    assert active.metrics["gate"]["evaluation_set_id"] == evaluation_set.pk
    active.passed_evaluation = True
    active.save(update_fields=["passed_evaluation"])
    active.activate()

    second = save_token_classifier(tmp_path / "second", labels=3)
    call_command(
        "import_prm", str(second), "--name", "second", "--step-separator", "\\n",
        stdout=io.StringIO(),
    )  # fmt: skip

    version = ModelVersion.objects.get(name="second")
    on_set, gate = version.metrics["evaluation_set"], version.metrics["gate"]
    assert EvaluationSet.objects.count() == 1 and on_set["id"] == evaluation_set.pk
    assert on_set["active_model"] == active.pk and on_set["active_auroc"] is not None
    assert on_set["active_auroc"] == pytest.approx(active.metrics["evaluation_set"]["new_auroc"])
    assert gate["evaluation_set_id"] == evaluation_set.pk and gate["passed"] is (
        on_set["new_auroc"] >= 0.01
    )


def test_a_step_tag_lm_is_imported_with_its_tag_and_tokens_and_read_at_each_tag(
    media, db, tmp_path
):
    from modeling.training.data import Solution as CoreSolution
    from modeling.training.external import load_prm
    from modeling.training.score import score_solutions

    source = save_step_tag_lm(tmp_path / "shepherd")
    # Math-Shepherd's tag "ки" is 4 tokens for the tiny byte-level tokenizer: refused.
    with pytest.raises(CommandError, match="step tag 'ки' is 4 tokens"):
        call_command("import_prm", str(source))
    assert not ModelVersion.objects.exists() and not imported_folders(media)

    call_command(
        "import_prm", str(source), "--step-tag", "#", "--good-token", "+", "--bad-token", "-",
        stdout=io.StringIO(),
    )  # fmt: skip

    version = ModelVersion.objects.get()
    assert version.kind == ModelVersion.Kind.STEP_TAG and not version.is_active
    assert version.metrics["gate"]["reason"].startswith("no evaluation set: 10 problems")
    model = load_prm(version.artifact_path)
    solution = CoreSolution("What is 1+1?", ["1+1=2 # no tag here", "The answer is 2."])
    (probs,) = score_solutions(model, [solution])
    assert probs.shape == (2, 3) and (probs[:, 1] == 0).all()
    # By hand: the LM's next-token logits at the tag placed after each step, "+" against "-".
    import torch

    text = "What is 1+1? 1+1=2  no tag here #\nThe answer is 2. #"
    ids = model.tokenizer(text, return_tensors="pt")["input_ids"]
    logits = model.model(input_ids=ids).logits[0]
    at = [i for i, t in enumerate(ids[0].tolist()) if t == model.manifest["step_tag_id"]]
    good, bad = model.manifest["good_token_id"], model.manifest["bad_token_id"]
    expected = torch.softmax(logits[at][:, [good, bad]], dim=-1)[:, 0].detach().numpy()
    assert probs[:, 2] == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda f: save_token_classifier(f, labels=4), "2 labels .* or 3 .*not 4"),
        (lambda f: f.mkdir() or f, "no readable config.json"),
    ],
    ids=["four-labels", "no-config"],
)
def test_a_folder_that_is_not_a_prm_is_refused_and_writes_nothing(
    media, db, tmp_path, make, message
):
    source = make(tmp_path / "not-a-prm")
    with pytest.raises(CommandError, match=message):
        call_command("import_prm", str(source))
    assert not ModelVersion.objects.exists() and not imported_folders(media)


def _zip(folder: Path) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in folder.iterdir():
            archive.write(path, f"{folder.name}/{path.name}")
    buffer.seek(0)
    buffer.name = f"{folder.name}.zip"
    return buffer


def test_the_api_imports_an_uploaded_zip_and_gates_it_on_the_worker(
    media, labels, tmp_path, researcher, client, open_evaluation_gate, eager_tasks
):
    create_evaluation_set(count=3, seed=0)
    archive = _zip(save_token_classifier(tmp_path / "ours", labels=3, separator="\n\n"))
    client.force_login(researcher)
    with eager_tasks():
        response = client.post(
            "/p/default/api/models/import/", {"file": archive, "name": "ours", "activate": "true"}
        )
    assert response.status_code == 201, response.content
    assert response.json()["kind"] == "token_classification"
    version = ModelVersion.objects.get()
    assert version.name == "ours" and version.is_active and version.passed_evaluation
    manifest = json.loads((Path(version.artifact_path) / "external.json").read_text())
    assert (manifest["labels"], manifest["step_separator"]) == (3, "\n\n")  # from config.json
    assert [p.name for p in imported_folders(media)] == [Path(version.artifact_path).name]


@pytest.mark.parametrize("path", ["/etc", "../", "missing", "x" * 2000])
def test_the_api_refuses_a_folder_outside_the_models_root_with_400(
    media, db, researcher, client, path
):
    client.force_login(researcher)
    response = client.post(
        "/p/default/api/models/import/", {"path": path}, content_type="application/json"
    )
    assert response.status_code == 400
    assert ModelVersion.objects.count() == 0 and not imported_folders(media)


def test_the_api_refuses_an_upload_that_is_no_archive_and_a_labeler_with_403(
    media, db, researcher, labeler, client
):
    client.force_login(labeler)
    assert client.post("/p/default/api/models/import/", {"path": "x"}).status_code == 403
    client.force_login(researcher)
    junk = io.BytesIO(b"not an archive")
    junk.name = "model.zip"
    response = client.post("/p/default/api/models/import/", {"file": junk})
    assert response.status_code == 400 and "not a zip or tar" in response.json()["detail"]
    assert ModelVersion.objects.count() == 0 and not list((media / "models").iterdir())


def test_the_review_page_scores_with_an_imported_active_model(
    media, db, tmp_path, client, lead, labeler, settings, eager_tasks
):
    settings.STEPWISE_PRM_EVAL_MIN_AUROC = 0.0  # no evaluation set: nothing measured passes
    save_token_classifier(settings.STEPWISE_MODELS_ROOT / "trl-prm")
    client.force_login(lead)
    with eager_tasks():
        response = client.post(
            "/p/default/api/models/import/",
            {"path": "trl-prm", "activate": True, "step_separator": "\n"},
            content_type="application/json",
        )
    assert response.status_code == 201, response.content
    version = ModelVersion.active()
    # Named under its root's setting, as the request named it: the server's path stays there.
    assert version is not None and version.source == "STEPWISE_MODELS_ROOT/trl-prm"
    batch = make_batch()
    solution = make_solution(batch)
    labeled(solution, labeler, [1, 1, 1])

    with eager_tasks():
        scored = client.post(reverse("modeling_review:score", args=[batch.pk]), follow=True)
    assert b"Scoring 1 solutions" in scored.content
    score = SolutionScore.objects.get(solution=solution, model_version=version)
    assert len(score.step_probs) == len(solution.steps)
    page = client.get(f"{reverse('modeling_review:queue')}?batch={batch.pk}").content.decode()
    assert f"Solution {solution.pk}" in page and selectors.review_queue(batch).unscored == 0
    page = client.get(reverse("modeling_review:solution", args=[solution.pk])).content.decode()
    first = score.step_probs[0]  # the imported model's P(-1) / P(0) / P(+1) beside the labels
    assert f'{first[0]:.2f}</span> / <span title="P(0)">0.00</span> / ' in page
    assert f"{first[2]:.2f}</span>" in page and "not scored this solution" not in page


# --- imports that never guess: the step separator, LoRA adapters, an upload's name -------------

PROBLEM = "What is 2+3?"
STEPS = ["2+3 is 5.", "So the answer is 5.", "Done."]


def trl_reading(folder: Path, separator: str, model=None) -> list[float]:
    """P(good) at each step, by plain transformers on TRL's PRMTrainer.tokenize_row layout:
    [BOS] + prompt, then each step + separator, the label at the separator's last token."""
    import torch
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    if model is None:
        model = AutoModelForTokenClassification.from_pretrained(folder)
    ids = [tokenizer.bos_token_id] + tokenizer(PROBLEM, add_special_tokens=False)["input_ids"]
    separator_ids = tokenizer.encode(separator, add_special_tokens=False)
    ends = []
    for step in STEPS:
        ids += tokenizer(step, add_special_tokens=False)["input_ids"] + separator_ids
        ends.append(len(ids) - 1)
    with torch.no_grad():
        logits = model.eval()(input_ids=torch.tensor([ids])).logits[0]
    return torch.softmax(logits[ends], dim=-1)[:, 1].tolist()


def imported_reading(version: ModelVersion) -> list[float]:
    from modeling.training.data import Solution as CoreSolution
    from modeling.training.external import load_prm
    from modeling.training.score import score_solutions

    (probs,) = score_solutions(load_prm(version.artifact_path), [CoreSolution(PROBLEM, STEPS)])
    assert (probs[:, 1] == 0).all()  # 2 labels: [1 - P(good), 0, P(good)]
    return probs[:, 2].tolist()


def test_a_trl_checkpoint_without_a_known_separator_is_refused_by_the_command_and_the_api(
    media, db, tmp_path, client, researcher
):
    source = save_token_classifier(tmp_path / "trl-prm")
    (source / "training_args.bin").write_bytes(b"a pickle: never opened")  # as TRL saves one

    with pytest.raises(CommandError) as refused:
        call_command("import_prm", str(source))
    message = str(refused.value)
    assert "config.json has no step_separator and none was given" in message
    assert "--step-separator for import_prm, step_separator for the API" in message
    assert "training_args.bin (a pickle, never opened here)" in message and "\n" not in message
    client.force_login(researcher)
    response = client.post("/p/default/api/models/import/", {"file": _zip(source)})
    assert response.status_code == 400, response.content
    assert response.json()["detail"] == f"cannot import trl-prm.zip: {message.split(': ', 1)[1]}"
    assert not ModelVersion.objects.exists() and not imported_folders(media)


def test_a_trl_checkpoint_with_its_separator_scores_as_plain_transformers_on_trls_layout(
    media, db, tmp_path
):
    source = save_token_classifier(tmp_path / "trl-prm")
    out = io.StringIO()

    call_command("import_prm", str(source), "--step-separator", "\\n\\n", stdout=out)

    version = ModelVersion.objects.get()
    assert "step separator '\\n\\n' (given)" in out.getvalue()
    manifest = version.metrics["imported"]
    assert (manifest["step_separator"], manifest["step_separator_from"]) == ("\n\n", "given")
    expected = trl_reading(source, "\n\n")
    assert imported_reading(version) == pytest.approx(expected, abs=1e-4)
    # The separator matters: the model read with "\n" says something else.
    assert trl_reading(source, "\n") != pytest.approx(expected, abs=1e-4)


def save_lora_adapter(folder: Path, base: Path, tokenizer: bool = True):
    """A LoRA adapter of a token classifier as TRL's PRMTrainer saves one with a peft_config
    (adapter_config.json, adapter_model.safetensors with the head in modules_to_save, the
    tokenizer; no config.json), its LoRA weights and head random; returns (folder, the peft
    model before merging)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForTokenClassification

    from tests.helpers.tiny_models import build_tokenizer

    torch.manual_seed(1)
    model = AutoModelForTokenClassification.from_pretrained(base, num_labels=2)
    config = LoraConfig(
        task_type="TOKEN_CLS", r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
        init_lora_weights=False,  # B random, not zero: the merge changes the weights
    )  # fmt: skip
    peft_model = get_peft_model(model, config).eval()
    peft_model.save_pretrained(folder)
    if tokenizer:
        build_tokenizer().save_pretrained(folder)
    return folder, peft_model


def test_a_lora_adapter_is_merged_into_the_base_given_and_scores_as_the_peft_model(
    media, db, tmp_path
):
    from tests.helpers.tiny_models import save_tiny_llama

    base = Path(save_tiny_llama(tmp_path / "base"))
    adapter, peft_model = save_lora_adapter(tmp_path / "adapter", base)
    assert not (adapter / "config.json").exists()
    # What the adapter names as its base is a folder: the command reads it only as --base.
    with pytest.raises(CommandError, match=r"never read \(import_prm takes --base FOLDER\)"):
        call_command("import_prm", str(adapter), "--step-separator", "\\n")
    with pytest.raises(CommandError, match="config.json has no step_separator"):
        call_command("import_prm", str(adapter), "--base", str(base))
    assert not ModelVersion.objects.exists() and not imported_folders(media)
    out = io.StringIO()

    call_command(
        "import_prm", str(adapter), "--base", str(base), "--step-separator", "\\n", stdout=out
    )

    version = ModelVersion.objects.get()
    assert version.kind == ModelVersion.Kind.TOKEN_CLASSIFICATION
    assert version.name == "imported adapter" and version.backbone == "LlamaForTokenClassification"
    assert f"a LoRA adapter merged into {base}" in out.getvalue()
    folder = Path(version.artifact_path)
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json", "external.json", "model.safetensors", "tokenizer.json",
        "tokenizer_config.json",
    ]  # fmt: skip
    manifest = version.metrics["imported"]
    assert manifest["adapter"] == {
        "peft_type": "LORA",
        "task_type": "TOKEN_CLS",
        "base_model": str(base),
        "base_folder": str(base),
    }
    assert manifest["labels"] == 2 and manifest["layout"] == "trl"
    expected = trl_reading(adapter, "\n", model=peft_model)
    assert imported_reading(version) == pytest.approx(expected, abs=1e-4)
    # The adapter changes what the base says: the merge is not a no-op.
    with peft_model.disable_adapter():
        assert trl_reading(adapter, "\n", model=peft_model) != pytest.approx(expected, abs=1e-4)


def _zip_as(folder: Path, filename: str) -> io.BytesIO:
    archive = _zip(folder)
    archive.name = filename
    return archive


def test_the_api_refuses_an_adapter_whose_base_is_a_server_path(
    media, db, tmp_path, client, researcher, settings
):
    from tests.helpers.tiny_models import save_tiny_llama

    base = Path(save_tiny_llama(tmp_path / "base"))  # it exists, and is never read
    adapter, _ = save_lora_adapter(settings.STEPWISE_MODELS_ROOT / "adapter", base)
    client.force_login(researcher)

    uploaded = client.post(
        "/p/default/api/models/import/",
        {"file": _zip_as(adapter, "adapter.zip"), "step_separator": "\n"},
    )
    by_path = client.post(
        "/p/default/api/models/import/",
        {"path": "adapter", "step_separator": "\n"},
        content_type="application/json",
    )

    for response in (uploaded, by_path):
        assert response.status_code == 400, response.content
        detail = response.json()["detail"]
        assert f"base_model_name_or_path) {str(base)!r} is neither a named offline backbone" in (
            detail
        )
        assert "nor a model in the local Hugging Face cache; a folder it names is never read" in (
            detail
        )
    assert not ModelVersion.objects.exists() and not imported_folders(media)


def test_an_upload_is_named_after_its_file_and_a_name_taken_is_told_apart_or_refused(
    media, db, tmp_path, client, researcher
):
    source = save_token_classifier(tmp_path / "unpacked", labels=3, separator="\n\n")
    client.force_login(researcher)

    def post(filename: str, **fields):
        return client.post(
            "/p/default/api/models/import/", {"file": _zip_as(source, filename), **fields}
        )

    first, second = post("My PRM v2.tar.gz.zip"), post("My PRM v2.tar.gz.zip")
    tarred = post("trl  prm.tgz")
    assert (first.status_code, second.status_code, tarred.status_code) == (201,) * 3
    assert first.json()["name"] == "imported My PRM v2.tar.gz"
    assert second.json()["name"] == "imported My PRM v2.tar.gz (2)"  # told apart
    assert tarred.json()["name"] == "imported trl prm"  # its spaces made one

    named = post("x.zip", name="ours")
    taken = post("x.zip", name="ours")
    assert named.status_code == 201 and named.json()["name"] == "ours"  # the name given wins
    assert taken.status_code == 400
    version = ModelVersion.objects.get(name="ours")
    assert (
        taken.json()["detail"]
        == f"model version {version.pk} is named 'ours' already: give another name"
    )
    assert ModelVersion.objects.count() == 4 and len(imported_folders(media)) == 4


def test_a_causal_lm_lora_adapter_is_merged_and_read_at_step_tags(media, db, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from tests.helpers.tiny_models import save_tiny_llama

    base = Path(save_tiny_llama(tmp_path / "base"))
    torch.manual_seed(2)
    config = LoraConfig(task_type="CAUSAL_LM", r=4, target_modules=["q_proj"])
    get_peft_model(AutoModelForCausalLM.from_pretrained(base), config).save_pretrained(
        tmp_path / "shepherd-lora"
    )  # no tokenizer saved: the base's is used

    call_command(
        "import_prm", str(tmp_path / "shepherd-lora"), "--base", str(base),
        "--step-tag", "#", "--good-token", "+", "--bad-token", "-", stdout=io.StringIO(),
    )  # fmt: skip

    version = ModelVersion.objects.get()
    assert version.kind == ModelVersion.Kind.STEP_TAG and version.backbone == "LlamaForCausalLM"
    assert version.metrics["imported"]["adapter"]["task_type"] == "CAUSAL_LM"
    assert (Path(version.artifact_path) / "tokenizer.json").exists()


def test_an_orm_is_imported_as_an_outcome_model_gated_on_solution_auroc_and_never_active(
    media, labels, tmp_path
):
    from tests.modeling.training.test_outcome import save_reward_model

    create_evaluation_set(count=3, seed=0)
    source = save_reward_model(tmp_path / "reward-model")
    out = io.StringIO()

    call_command("import_prm", str(source), "--activate", "--step-separator", "\\n", stdout=out)

    version = ModelVersion.objects.get()
    assert version.kind == ModelVersion.Kind.SEQUENCE_CLASSIFICATION and version.is_outcome
    assert version.metrics["imported"]["labels"] == 1
    gate = version.metrics["gate"]
    assert gate["metric"] == "solution_auroc" and "evaluation_set" in version.metrics
    assert not version.is_active and not ModelVersion.objects.filter(is_active=True).exists()
    assert "An ORM is compared by best-of-N, never made active." in out.getvalue()
    # Its scores are the last step's alone, as a trained ORM's.
    from modeling.training.data import Solution as CoreSolution
    from modeling.training.external import load_prm
    from modeling.training.score import score_solutions

    (probs,) = score_solutions(load_prm(version.artifact_path), [CoreSolution(PROBLEM, STEPS)])
    assert np.isnan(probs[:-1]).all() and 0 < probs[-1, 2] < 1
