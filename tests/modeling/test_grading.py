import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from modeling import grading
from modeling.grading import GradeResult, extract_answer, grade_solution, is_equivalent
from tests.helpers.paths import ROOT, SHARED_DATA

DATA = SHARED_DATA
MATH500 = DATA / "math" / "math500.jsonl"
PRM800K_SAMPLES = DATA / "prm800k" / "samples.jsonl"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        pytest.skip(f"reference data not available: {path}")
    with path.open() as lines:
        return [json.loads(line) for line in lines]


def chosen_step_texts(label_line: dict[str, Any]) -> list[str]:
    """The solution a PRM800K labeler walked through: chosen completion or human rewrite."""
    texts = []
    for step in label_line["label"]["steps"]:
        if step["chosen_completion"] is not None:
            texts.append(step["completions"][step["chosen_completion"]]["text"])
        elif step["human_completion"] is not None:
            texts.append(step["human_completion"]["text"])
    return texts


def run_in_thread(func: Callable[[], Any]) -> Any:
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(func()))
    worker.start()
    worker.join(30)
    assert results, "the call did not return from the worker thread"
    return results[0]


# --- MATH500 -----------------------------------------------------------------------------------


def test_every_math500_answer_is_equivalent_to_itself() -> None:
    rows = read_jsonl(MATH500)
    not_equivalent = [
        row["answer"] for row in rows if not is_equivalent(row["answer"], row["answer"])
    ]
    assert not_equivalent == []


def test_every_math500_answer_survives_boxing_in_a_sentence_and_extraction() -> None:
    rows = read_jsonl(MATH500)
    failures = []
    for row in rows:
        answer = row["answer"]
        sentence = (
            f"Putting it together, the final answer is $\\boxed{{{answer}}}$. I hope it is correct."
        )
        extracted = extract_answer(sentence)
        if extracted != answer or not is_equivalent(extracted, answer):
            failures.append((answer, extracted))
    assert failures == []


def test_math500_reference_solutions_grade_correct() -> None:
    rows = read_jsonl(MATH500)
    wrong = [
        row["unique_id"]
        for row in rows
        if grade_solution(row["solution"], row["answer"]).correct is not True
    ]
    assert wrong == []


# --- equivalence tables ------------------------------------------------------------------------

# (answer, ground truth): forms MATH graders accept as the same answer.
EQUIVALENT = [
    ("1/2", r"\frac{1}{2}"),
    ("0.5", r"\frac{1}{2}"),
    (r"\dfrac12", r"\frac{1}{2}"),
    (r"\tfrac{1}{2}", "0.5"),
    (".5", "1/2"),
    ("2/4", r"\frac12"),
    (r"\frac{3}{4}", "3/4"),
    (r"-\frac{1}{2}", r"\frac{-1}{2}"),
    (r"\frac{7}{2}", "3.5"),
    (r"\frac{9}{2}", r"4\frac{1}{2}"),
    ("3.00", "3"),
    ("(1,2)", "(1, 2)"),
    (r"\left( 3, \frac{\pi}{2} \right)", r"(3,\pi/2)"),
    ("A", r"\text{(A)}"),
    ("(A)", r"\text{(A)}"),
    (r"\textbf{(A)}", "A"),
    (r"\mbox{(C)}", "C"),
    (r"10\%", "10"),
    ("10", r"10\%"),
    ("10 percent", r"10\%"),
    (r"5\text{ cm}", "5"),
    (r"5 \mbox{ cm}", "5"),
    (r"6\text{ square units}", "6"),
    (r"5", r"5\text{ cm}^2"),
    ("42 apples", "42"),
    ("3 dogs", "3"),
    (r"\frac{1}{2} cup", "0.5"),
    ("12 apples in total", "12"),
    (r"\frac{1}{2} \text{ hours}", "0.5"),
    ("x=3", "3"),
    ("3", "x=3"),
    ("k = 5", "5"),
    ("y = 2x + 3", "2x+3"),
    (r"\sqrt{2}/2", r"\frac{\sqrt2}{2}"),
    (r"\frac{1}{\sqrt{2}}", r"\frac{\sqrt{2}}{2}"),
    (r"2\sqrt{3}", r"\sqrt{12}"),
    (r"\sqrt[3]{2}", "2^{1/3}"),
    (r"\frac{\sqrt{3}}{2}", "0.866025"),
    ("[1,2)", "[1, 2)"),
    (r"\left[1, 2\right)", "[1,2)"),
    (r"(-\infty, 3]", r"(-\infty,3]"),
    (r"(-\infty,0)\cup(1,\infty)", r"(-\infty, 0) \cup (1, \infty)"),
    (r"\infty", r"\infty"),
    (r"x \in [1,2]", "[1,2]"),
    (r"\pi/2", r"\frac{\pi}{2}"),
    (r"\frac{4}{3}\pi", r"\frac{4\pi}{3}"),
    ("1,000", "1000"),
    ("1000", "1,000"),
    ("1,000,000", "1000000"),
    (r"10,\!080", "10080"),
    ("300{,}000", "300000"),
    (r"10\,000", "10000"),
    (r"30^\circ", "30"),
    ("30", r"30^{\circ}"),
    ("45 degrees", "45"),
    (r"\$1.50", "1.5"),
    (r"\$1,\!000", "1000"),
    (r"\{1,2\}", r"\{2,1\}"),
    ("1, 2, 3", "3,2,1"),
    (r"x=2 \text{ or } x=-1", "-1,2"),
    ("a=2, b=3", "(2,3)"),
    ("(x+1)^2", "x^2+2x+1"),
    (r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}", r"\begin{pmatrix}1\\2\end{pmatrix}"),
    (r"\text{Evelyn}", "Evelyn"),
    (r"\text{even}", r"\text{Even}"),
    ("2^{10}", "1024"),
    (r"3 \times 10^5", "300000"),
    (r"0.\overline{3}", r"\frac{1}{3}"),
    (r"0.\overline{36}", r"\frac{4}{11}"),
    (r"1.2\overline{3}", r"\frac{37}{30}"),
    ("1+i", "i+1"),
    ("$5$", "5"),
    (r"\boxed{5}", "5"),
]

# (answer, ground truth): look alike, but a MATH grader marks them wrong.
NOT_EQUIVALENT = [
    ("1/2", "2"),
    ("(1,2)", "(2,1)"),
    ("[1,2)", "[1,2]"),
    ("(0,\\infty)", "[0,\\infty)"),
    ("(1,2)", "[1,2]"),
    (r"\sqrt{2}", "2"),
    ("0.5", "0.05"),
    (r"\frac{1}{3}", "0.33"),
    (r"\frac{3}{4}", r"\frac{4}{3}"),
    ("x=3", "4"),
    (r"10\%", "100"),
    (r"\text{(A)}", "B"),
    (r"\text{(A)}", r"\text{(B)}"),
    ("1,000", "1"),
    ("1,5", "1.5"),
    ("1,2", "12"),
    (r"\pi/2", r"\pi"),
    (r"\{1,2\}", r"\{1,3\}"),
    ("1,2,3", "1,2"),
    (r"2\sqrt{3}", r"3\sqrt{2}"),
    ("-1", "1"),
    (r"\infty", r"-\infty"),
    (r"30^\circ", "60"),
    ("x^2", "x^3"),
    ("3", "3.01"),
    ("2^{10}", "1023"),
    (r"\text{Monday}", r"\text{Tuesday}"),
    (r"\text{odd}", r"\text{even}"),
    (r"5\text{ cm}", "6"),
    ("i", "-i"),
    ("q - p", "p - q"),
    ("y = 5", "x = 5"),
    (r"0.\overline{3}", "0.3"),
    ("5!", "5"),
]


@pytest.mark.parametrize(("answer", "ground_truth"), EQUIVALENT)
def test_equivalent_forms_are_accepted(answer: str, ground_truth: str) -> None:
    assert is_equivalent(answer, ground_truth)


@pytest.mark.parametrize(("answer", "ground_truth"), NOT_EQUIVALENT)
def test_different_answers_are_rejected(answer: str, ground_truth: str) -> None:
    assert not is_equivalent(answer, ground_truth)


def test_the_tables_are_big_enough() -> None:
    assert len(EQUIVALENT) >= 40
    assert len(NOT_EQUIVALENT) >= 20


@pytest.mark.parametrize("empty", ["", "   ", "$$"])
def test_an_empty_answer_is_never_equivalent(empty: str) -> None:
    assert not is_equivalent(empty, "0")
    assert not is_equivalent(empty, empty)


# --- extraction ----------------------------------------------------------------------------------


def test_answer_section_of_prm800k_samples_is_extracted() -> None:
    finished = [
        line for line in read_jsonl(PRM800K_SAMPLES) if line["label"]["finish_reason"] == "solution"
    ]
    assert finished, "the samples should hold finished solutions"
    for line in finished:
        steps = chosen_step_texts(line)
        expected = steps[-1].split("# Answer")[-1].strip()
        assert extract_answer(steps) == expected
        assert extract_answer("\n\n".join(steps)) == expected


def test_prm800k_samples_grade_against_their_ground_truth() -> None:
    graded = [
        grade_solution(chosen_step_texts(line), line["question"]["ground_truth_answer"])
        for line in read_jsonl(PRM800K_SAMPLES)
        if line["label"]["finish_reason"] == "solution" and line["question"]["ground_truth_answer"]
    ]
    assert graded
    # Every finished sample in the file reached the right answer.
    assert all(result.correct is True for result in graded), graded


@pytest.mark.parametrize(
    ("solution", "expected"),
    [
        ("That means a pencil costs 29 cents.\n\n# Answer\n\n29", "29"),
        (["Step one.", "So $x=5$.\n\n# Answer\n\n$\\frac{1}{2}$."], r"\frac{1}{2}"),
        ("An early \\boxed{7} is overridden.\n\n# Answer\n\n8, 3, 1", "8, 3, 1"),
        (r"We get $\boxed{\frac{1}{\sqrt{2}}}$.", r"\frac{1}{\sqrt{2}}"),
        (
            r"First \boxed{1}, then \boxed{\left\{ \frac{a}{b}, 2 \right\}}.",
            r"\left\{ \frac{a}{b}, 2 \right\}",
        ),
        (r"so \boxed{x} and finally \fbox{3} here", "3"),
        (r"Hence $\boxed 5$.", "5"),
        ("The answer is $5$ apples. Because it is.", "5"),
        ("Lots of work.\nAnswer: 7", "7"),
        ("We conclude the final answer is 12.", "12"),
        ("Adding up, $x + y = 10$.", "x + y = 10"),
        ("Thus the total is 42 apples.", "42 apples"),
    ],
)
def test_answer_extraction(solution: str | list[str], expected: str) -> None:
    assert extract_answer(solution) == expected


def test_every_final_step_of_the_release_gives_its_answer_section_to_grading() -> None:
    from labeling.prm800k import answer_section, is_final_step

    finals = []
    for line in read_jsonl(PRM800K_SAMPLES):
        for step in line["label"]["steps"]:
            finals += [c["text"] for c in step["completions"] or [] if is_final_step(c["text"])]
        finals += [s for s in line["question"].get("pre_generated_steps") or [] if is_final_step(s)]
    assert len(finals) >= 10
    for step in finals:
        section = answer_section(step)
        assert section is not None and extract_answer(step) == section.answer


@pytest.mark.parametrize(
    ("solution", "expected"),
    [
        # The heading as the labeling app reads it wins over an earlier \boxed{}.
        ("I guess \\boxed{3}.\r\n\r\n# Answer\r\n\r\n4", "4"),
        ("I guess \\boxed{3}.\n\n# Answer 4", "4"),
        # Not the heading there, so not here either: the last \boxed{} answers.
        ("I guess \\boxed{3}.\n\n#Answer\n\n4", "3"),
        ("I guess \\boxed{3}, and I'd write # Answer\n\n4", "3"),
    ],
)
def test_answer_extraction_reads_the_heading_by_the_final_step_rule(
    solution: str, expected: str
) -> None:
    assert extract_answer(solution) == expected


@pytest.mark.parametrize("solution", ["", "   \n ", [], ["", ""], "Some work.\n\n# Answer\n\n"])
def test_no_answer_gives_none(solution: str | list[str]) -> None:
    assert extract_answer(solution) is None


def test_unbalanced_box_is_not_truncated_into_an_answer() -> None:
    assert extract_answer(r"Answer: 4. Then \boxed{\frac{1}{2}") == "4"


# --- grade_solution ------------------------------------------------------------------------------


def test_grade_solution_marks_right_and_wrong_answers() -> None:
    steps = ["Let p be the price.", "So p = 29.\n\n# Answer\n\n29"]
    assert grade_solution(steps, "29") == GradeResult(answer="29", correct=True)
    assert grade_solution(steps, "30") == GradeResult(answer="29", correct=False)


@pytest.mark.parametrize("ground_truth", [None, "", "  "])
def test_grade_solution_without_ground_truth_is_ungraded(ground_truth: str | None) -> None:
    assert grade_solution("# Answer\n\n29", ground_truth) == GradeResult(answer="29", correct=None)


def test_grade_solution_without_an_answer_is_ungraded() -> None:
    assert grade_solution("I give up.\n\n# Answer\n\n", "29") == GradeResult(
        answer=None, correct=None
    )


def test_grading_prints_no_timeout_is_disabled_warning() -> None:
    """math-verify warns once per process that its own timeouts are off (we bound the call
    ourselves), so a fresh process: setup_demo printed the warning twice."""
    script = (
        "import logging; logging.basicConfig(level=logging.INFO)\n"
        "from modeling.grading import grade_solution\n"
        "print(grade_solution('So p = 29.\\n\\n# Answer\\n\\n29', '29').correct)\n"
        "logging.getLogger('math_verify.parser').warning('another math-verify warning')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout == "True\n"
    assert "Timeout is disabled" not in done.stderr
    assert "another math-verify warning" in done.stderr  # only that one warning is dropped


# --- time bounds ---------------------------------------------------------------------------------

PATHOLOGICAL = [
    "10^{10^{10^{10}}}",
    "(" * 5000 + "1" + ")" * 5000,
    "\\frac{1}{" * 1200 + "2" + "}" * 1200,
    "10^{10000000000}",
    "1000000!",
    "x^2^3",
    "1" * 10_000,
]


@pytest.mark.parametrize("pathological", PATHOLOGICAL)
def test_pathological_input_is_refused_by_the_guards_on_either_side(
    pathological: str, verify_calls: list[str]
) -> None:
    assert not is_equivalent(pathological, "5")
    assert not is_equivalent("5", pathological)
    assert verify_calls == []  # refused before math-verify: no parse, no time limit needed


def test_pathological_input_is_refused_by_the_guards_from_a_worker_thread(
    verify_calls: list[str],
) -> None:
    assert run_in_thread(lambda: [is_equivalent(p, "5") for p in PATHOLOGICAL]) == [False] * len(
        PATHOLOGICAL
    )
    assert verify_calls == []


def test_a_non_positive_time_limit_is_a_caller_error() -> None:
    with pytest.raises(ValueError):
        is_equivalent("1", "1", timeout_s=0)


def test_harmless_powers_inside_exponents_are_still_graded() -> None:
    assert is_equivalent("e^{x^2}", "e^{x^{2}}")
    assert is_equivalent("(x^2)^3", "x^6")


def slow_but_small_expression(variant: int) -> str:
    """Passes the input guards yet takes math-verify many seconds: (x+n)^(2^12) is expanded.
    `variant` keeps math-verify's parse cache from answering a second call instantly."""
    return "(" * 12 + f"x+{variant}" + ")^2" * 12


def slow_to_parse_expression(variant: int) -> str:
    """Passes the guards; ANTLR needs about two seconds to parse it, then it is done."""
    return "+".join(f"x^{{{i + variant}}}" for i in range(70))


class VerifyCalls(list):
    """What reached math-verify (the input guards let it through): each text its `parse` was
    given, without the `$` delimiters grading adds, and in `finished` those it parsed."""

    def __init__(self) -> None:
        super().__init__()
        self.finished: list[str] = []


@pytest.fixture
def verify_calls(monkeypatch: pytest.MonkeyPatch) -> VerifyCalls:
    """A spy on math-verify's `parse`, the library boundary every comparison crosses first."""
    calls = VerifyCalls()
    real_parse = grading.parse

    def spy(text: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(text.strip("$"))
        parsed = real_parse(text, *args, **kwargs)
        calls.finished.append(text.strip("$"))
        return parsed

    monkeypatch.setattr(grading, "parse", spy)
    return calls


def test_a_slow_comparison_is_interrupted_in_the_main_thread(verify_calls: VerifyCalls) -> None:
    # math-verify swallows the alarm's exception and answers False: the call reached it and
    # came back False, where the full comparison would say (x+1)^4096 is not x+1 only much later.
    assert not is_equivalent(slow_but_small_expression(1), "x+1", timeout_s=0.5)
    # It reached math-verify (the ground truth is parsed first; on a loaded machine the limit
    # may come before the answer's parse even starts).
    assert verify_calls[:1] == ["x+1"]


def test_a_slow_comparison_times_out_in_a_worker_thread(verify_calls: VerifyCalls) -> None:
    assert not run_in_thread(lambda: is_equivalent(slow_to_parse_expression(1), "x", timeout_s=0.1))
    assert verify_calls[:1] == ["x"]  # it reached math-verify
    # The answer came while the parse (seconds of CPU) was still running: the limit, not the end.
    assert slow_to_parse_expression(1) not in verify_calls.finished


def test_the_time_limit_holds_for_any_slow_comparison(monkeypatch: pytest.MonkeyPatch) -> None:
    def never_finishes(*args: Any, **kwargs: Any) -> bool:
        while True:
            time.sleep(0.01)

    monkeypatch.setattr(grading, "verify", never_finishes)  # math-verify's comparison
    # Returning at all is the proof: the comparison never ends by itself.
    assert not is_equivalent("1", "1", timeout_s=0.2)
    assert not run_in_thread(lambda: is_equivalent("1", "1", timeout_s=0.2))


def test_the_main_thread_alarm_is_cleaned_up() -> None:
    import signal

    handler_before = signal.getsignal(signal.SIGALRM)
    assert is_equivalent("1/2", "0.5")
    assert signal.getsignal(signal.SIGALRM) is handler_before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_many_threads_grade_concurrently() -> None:
    pairs = [("1/2", "0.5", True), ("(1,2)", "(2,1)", False), (r"10\%", "10", True)] * 4
    results: dict[int, bool] = {}

    def grade(index: int, answer: str, truth: str) -> None:
        results[index] = is_equivalent(answer, truth)

    workers = [
        threading.Thread(target=grade, args=(i, answer, truth))
        for i, (answer, truth, _) in enumerate(pairs)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert [results[i] for i in range(len(pairs))] == [expected for _, _, expected in pairs]
