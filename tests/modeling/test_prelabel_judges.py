"""The judges on fixed inputs (modeling/judges.py): the critic's strict parser, the PRM's
thresholds, Math-Shepherd's soft and hard labels, and PRM800K's stop rule for all."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from modeling.generator import GeneratorError, LocalGenerator, Sampling, Text
from modeling.judges import (
    CRITIC_TEMPLATE,
    JudgeItem,
    LLMJudge,
    MCJudge,
    PRMJudge,
    TemplateError,
    Thresholds,
    check_template,
    choose_thresholds,
    critic_judgement,
    critic_prompt,
    estimate_mc,
    label_steps,
    parse_critic,
    stopped,
)

ITEM = JudgeItem("What is $2 + 3$?", ["2 + 3 = 6.", "So it is 6.", "# Answer\n\n6"], "5")


class Scripted:
    """A generator that answers from a script (prompt substring -> texts), counting calls."""

    name = "scripted"
    concurrency = 1

    def __init__(self, answer, error: Exception | None = None) -> None:
        self.answer = answer
        self.error = error
        self.prompts: list[str] = []

    def complete(self, prompt: str, *, n: int, sampling: Sampling, stop: Sequence[str] = (), **_):
        self.prompts.append(prompt)
        if self.error is not None:
            raise self.error
        return [Text(text, "stop") for text in self.answer(prompt, n)]


def test_the_stop_rule_leaves_no_label_after_the_first_error():
    judgement = stopped([1, -1, 1, 0], [0.9, 0.8, 0.7, 0.6])
    assert judgement.labels == [1, -1, None, None]
    assert judgement.scores == [0.9, 0.8, None, None]
    assert judgement.first_error == 1 and not judgement.no_label


# --- llm ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "index"),
    [
        ("Paragraph 1 adds wrongly. \\boxed{1}", 1),
        ("All fine: \\boxed{-1}", -1),
        ("\\boxed{ 0 }", 0),
        ("no box at all, the answer is 1", None),
        ("\\boxed{one}", None),
        ("\\boxed{3}", None),  # three steps: 0..2
        ("\\boxed{-2}", None),
        ("\\boxed{1} or maybe \\boxed{1}", None),  # two boxes: never a guess
        ("\\boxed{1.0}", None),
        ("\\boxed{}", None),
    ],
)
def test_the_critic_answer_is_parsed_strictly(answer, index):
    assert parse_critic(answer, 3) == index


def test_a_named_step_is_wrong_the_ones_before_right_and_none_after():
    assert critic_judgement("\\boxed{1}", 3).labels == [1, -1, None]
    assert critic_judgement("\\boxed{1}", 3).first_error == 1
    assert critic_judgement("\\boxed{-1}", 3).labels == [1, 1, 1]
    garbage = critic_judgement("I think step two", 3)
    assert garbage.no_label and garbage.labels == [None] * 3 and garbage.raw == "I think step two"


def test_the_critic_prompt_tags_every_step_from_zero():
    prompt = critic_prompt(ITEM)
    assert "<paragraph_0>\n2 + 3 = 6.\n</paragraph_0>" in prompt
    assert "<paragraph_2>\n# Answer\n\n6\n</paragraph_2>" in prompt
    assert ITEM.problem in prompt and "\\boxed{}" in prompt


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("Judge {problem} please", "lacks {steps}"),
        ("{steps} only", "lacks {problem}"),
        ("", "empty"),
        ("{problem} {steps} {other}", "field other than"),
        ("{problem} {steps} \\boxed{}", "field other than"),
    ],
)
def test_a_template_without_its_placeholders_is_refused(template, message):
    with pytest.raises(TemplateError, match=message):
        check_template(template)
    assert check_template(CRITIC_TEMPLATE) == CRITIC_TEMPLATE


def test_the_llm_judge_counts_garbage_and_a_timeout_as_no_label_and_a_refusal_raises():
    answers = iter(["\\boxed{0}", "what?"])
    judge = LLMJudge(Scripted(lambda prompt, n: [next(answers)]))
    first, second = judge.judge([ITEM, ITEM])
    assert first.labels == [-1, None, None] and second.no_label

    class APITimeoutError(Exception):
        pass

    timeout = GeneratorError("the generator failed: Request timed out.")
    timeout.__cause__ = APITimeoutError()
    [timed_out] = LLMJudge(Scripted(None, error=timeout)).judge([ITEM])
    assert timed_out.no_label and timed_out.raw.startswith("timed out")
    refused = GeneratorError("the generator answered 403: forbidden")
    with pytest.raises(GeneratorError, match="403"):
        LLMJudge(Scripted(None, error=refused)).judge([ITEM])


# --- prm ----------------------------------------------------------------------------------------


def test_thresholds_label_each_step_with_the_probability_of_its_label():
    probs = np.array([[0.1, 0.1, 0.8], [0.2, 0.5, 0.3], [0.7, 0.1, 0.2], [0.0, 0.0, 1.0]])
    judgement = label_steps(probs, Thresholds(neg=0.6, pos=0.6))
    assert judgement.labels == [1, 0, -1, None]
    assert judgement.scores == pytest.approx([0.8, 0.5, 0.7, None])
    nan = label_steps(np.array([[0.1, 0.1, 0.8], [np.nan] * 3]), Thresholds())
    assert nan.labels == [1, None] and nan.first_error is None


@pytest.mark.parametrize("bad", [math.nan, math.inf, 0.0, -0.2, 1.5])
def test_a_threshold_outside_0_1_is_refused(bad):
    with pytest.raises(ValueError, match="threshold"):
        Thresholds(neg=bad)


def test_the_thresholds_chosen_maximise_kappa_on_a_hand_made_case():
    # Humans: two -1 at P(-1) 0.35 and 0.4, two +1 at P(+1) 0.45 and 0.9, one 0 in between.
    probs = np.array(
        [[0.35, 0.3, 0.35], [0.4, 0.3, 0.3], [0.1, 0.45, 0.45], [0.05, 0.05, 0.9], [0.2, 0.6, 0.2]]
    )
    humans = [-1, -1, 1, 1, 0]
    chosen = choose_thresholds(probs, humans)
    # neg 0.3 alone catches both -1 and not the 0 (0.2 would); pos 0.3 or 0.4 gives both +1
    # and leaves the 0 (P(+1) 0.2): perfect agreement, the first in grid order wins.
    assert (chosen["neg"], chosen["pos"], chosen["kappa"]) == (0.3, 0.3, 1.0)
    assert chosen["steps"] == 5
    labels = [Thresholds(chosen["neg"], chosen["pos"]).label(row)[0] for row in probs]
    assert labels == humans
    assert choose_thresholds(np.zeros((0, 3)), [])["kappa"] is None


def test_the_prm_judge_labels_a_tiny_model_s_steps(tiny_llama, tmp_path):
    from modeling.training.config import TrainConfig
    from modeling.training.model import ProcessRewardModel

    model = ProcessRewardModel.from_config(TrainConfig(backbone=tiny_llama, max_length=256))
    judge = PRMJudge(model, Thresholds(neg=0.3, pos=0.3), name="prm: tiny")
    [judgement] = judge.judge([ITEM])
    assert len(judgement.labels) == 3 and judge.name == "prm: tiny"
    assert all(label in (-1, 0, 1, None) for label in judgement.labels)
    first = judgement.first_error
    if first is not None:
        assert judgement.labels[first + 1 :] == [None] * (2 - first)
    labelled = [s for s in judgement.scores if s is not None]
    assert labelled and all(0 <= s <= 1 for s in labelled)


# --- mc -----------------------------------------------------------------------------------------


def test_mc_soft_is_the_share_correct_and_hard_is_any_correct_until_the_first_wrong():
    # After step 0, 1 of 4 completions reaches 5; after step 1 (which says 6), none does.
    def answer(prompt, n):
        return (
            ["# Answer\n\n5"] + ["# Answer\n\n6"] * (n - 1)
            if "So it is 6" not in prompt
            else ["# Answer\n\n6"] * n
        )

    generator = Scripted(answer)
    judge = MCJudge(generator, k=4, max_steps=10)
    [judgement] = judge.judge([ITEM])
    assert judgement.soft_scores == [0.25, 0.0, None]
    assert judgement.labels == [1, -1, None] and judgement.first_error == 1
    assert judgement.scores == [0.25, 1.0, None]
    assert len(generator.prompts) == 2 and judge.completions_made == 8  # none past the -1
    assert estimate_mc([ITEM], k=4, max_steps=10, max_tokens=100) == {
        "completions": 12,
        "tokens": 1200,
    }


def test_mc_stops_at_max_steps_and_gives_no_label_without_a_ground_truth():
    judge = MCJudge(Scripted(lambda prompt, n: ["# Answer\n\n5"] * n), k=2, max_steps=1)
    [capped] = judge.judge([ITEM])
    assert capped.labels == [1, None, None] and capped.soft_scores == [1.0, None, None]
    [unknown] = judge.judge([JudgeItem(ITEM.problem, ITEM.steps, None)])
    assert unknown.no_label
    assert estimate_mc([ITEM], k=2, max_steps=1, max_tokens=10)["completions"] == 2


def test_mc_with_the_local_model_rolls_out_k_completions_per_step():
    generator = LocalGenerator()
    item = JudgeItem("What is $2 + 3$?", ["We add: $2 + 3 = 5$.", "# Answer\n\n5"], "5")
    judge = MCJudge(generator, k=2, max_steps=2, sampling=Sampling(max_tokens=16, seed=3))
    [judgement] = judge.judge([item])
    steps_rolled = 1 if judgement.labels[0] == -1 else 2
    assert judge.completions_made == 2 * steps_rolled
    assert judgement.soft_scores[0] in (0.0, 0.5, 1.0)
    assert judgement.labels[0] == (1 if judgement.soft_scores[0] else -1)
