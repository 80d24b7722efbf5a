"""The admin lists the modeling rows: runs, model versions, generations, the pool."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from labeling.services.importing import import_math
from modeling.models import GenerationRun, ModelVersion, TrainingRun
from modeling.services.loop import import_pool
from tests.modeling.loop_helpers import SAMPLE_DIR


@pytest.mark.parametrize("model", ["trainingrun", "modelversion", "generationrun", "poolentry"])
def test_a_superuser_sees_each_modeling_list(client, db, model):
    import_math(SAMPLE_DIR / "problems.jsonl")
    import_pool(SAMPLE_DIR / "solutions.jsonl")
    run = TrainingRun.objects.create(name="first", config={})
    ModelVersion.objects.create(run=run, name="prm-1", backbone="tiny", artifact_path="/x")
    GenerationRun.objects.create(generation=1)
    client.force_login(get_user_model().objects.create_superuser("ada", password="ada-pw"))
    response = client.get(reverse(f"admin:modeling_{model}_changelist"))
    assert response.status_code == 200
    assert response.context["cl"].result_count >= 1
