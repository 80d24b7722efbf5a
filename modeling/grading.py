"""Answer grading: pull the final answer out of a solution and compare it with the ground truth.

Equivalence is decided by Hugging Face's `math-verify`; this module adds answer extraction in
PRM800K's format, a few MATH-specific normalisation rules math-verify misses, and a time bound
that works from any thread (math-verify's own timeout uses SIGALRM, main thread only).
"""

from __future__ import annotations

import logging
import re
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

from math_verify import parse, verify

from labeling.prm800k import answer_section

logger = logging.getLogger(__name__)


class _OwnTimeoutNotice(logging.Filter):
    """Drops math-verify's "Timeout is disabled ..." warning: _verify turns its SIGALRM timeouts
    off on purpose (_call_with_time_limit bounds the call), so the warning is noise in every
    command that grades (setup_demo printed it twice). Its other records pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Timeout is disabled")


# parse() warns on math_verify.parser, verify() on math_verify.grader, each once per process.
for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_OwnTimeoutNotice())

DEFAULT_TIMEOUT_S = 5.0

# Input guards. MATH answers are short (the longest in MATH500 is 53 characters) and shallow;
# anything far beyond these is garbage for grading purposes and slow to parse.
MAX_ANSWER_CHARS = 500
# ANTLR parsing time grows steeply with bracket depth (20 nested parentheses take ~1.5 s).
MAX_NESTING_DEPTH = 12
# A literal exponent or factorial argument with more digits builds an integer so large that
# sympy's C-level arithmetic holds the GIL for minutes, which no timeout can interrupt.
MAX_EXPONENT_DIGITS = 4
MAX_FACTORIAL_DIGITS = 4

T = TypeVar("T")


@dataclass(frozen=True)
class GradeResult:
    answer: str | None
    correct: bool | None  # None: no ground truth or no extractable answer


# --- extraction -----------------------------------------------------------------------------

_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_ANSWER_PHRASE = re.compile(
    r"(?:final answer|the answer|answer)\s*(?:is|:)\s*:?\s*(?P<answer>.+)", re.IGNORECASE
)
_INLINE_MATH = re.compile(
    r"(?<!\\)\$\$(?P<display>.+?)\$\$|(?<!\\)\$(?P<inline>(?:\\\$|[^$])+?)\$|\\\((?P<paren>.+?)\\\)"
)


def extract_answer(solution: str | Sequence[str]) -> str | None:
    """Return the final answer of a solution given as text or as a list of step texts.

    In order: the text under PRM800K's last `# Answer` heading (authoritative: an empty answer
    section gives None); else the content of the last `\\boxed{...}`/`\\fbox{...}`; else the last
    "The answer is X" / "Answer: X" phrase; else the last non-empty line (its last inline math,
    or what follows its last "=" or " is ", or the whole line).
    """
    text = solution if isinstance(solution, str) else "\n\n".join(solution)
    if not text.strip():
        return None

    section = answer_section(text)  # the same rule that ends a labeler's solution
    if section is not None:
        return _clean_answer(section.answer)

    boxed = _last_boxed_content(text)
    if boxed is not None:
        return _clean_answer(boxed)

    phrases = list(_ANSWER_PHRASE.finditer(text))
    if phrases:
        return _answer_from_phrase(phrases[-1].group("answer"))

    return _answer_from_last_line(text)


def _last_boxed_content(text: str) -> str | None:
    """Content of the last \\boxed{...} or \\fbox{...}, matching nested braces."""
    for match in reversed(list(_BOX_COMMAND.finditer(text))):
        rest = text[match.end() :]
        stripped = rest.lstrip()
        if stripped.startswith("{"):
            content = _balanced_group(stripped)
            if content is not None:
                return content
        elif rest[:1].isspace() and stripped:
            # TeX also allows `\boxed 5`: the argument is the next token.
            return re.split(r"[\s$]", stripped, maxsplit=1)[0]
    return None


def _balanced_group(text: str) -> str | None:
    """Given text starting with "{", return what lies inside its matching "}"."""
    depth = 0
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2  # skip escaped characters such as \{ and \}
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[1:i]
        i += 1
    return None  # unbalanced: no answer rather than a truncated one


def _answer_from_phrase(phrase: str) -> str | None:
    """Math in "The answer is $5$ apples. Because..." -> "5"."""
    maths = list(_INLINE_MATH.finditer(phrase))
    if maths:
        return _clean_answer(_math_content(maths[0]))
    return _clean_answer(re.split(r"\.\s", phrase, maxsplit=1)[0])


def _answer_from_last_line(text: str) -> str | None:
    line = [line.strip() for line in text.splitlines() if line.strip()][-1]
    maths = list(_INLINE_MATH.finditer(line))
    if maths:
        return _clean_answer(_math_content(maths[-1]))
    tail = re.split(r"=|\bis\b", line)[-1]
    return _clean_answer(tail) or _clean_answer(line)


def _math_content(match: re.Match[str]) -> str:
    return match["display"] or match["inline"] or match["paren"] or ""


def _clean_answer(answer: str) -> str | None:
    answer = _strip_math_delimiters(answer.strip())
    # A sentence-final full stop is not part of the answer ("1/2." would parse as 1);
    # keep `\,` and friends, and "!" (a factorial).
    while answer and answer[-1] in ".,;:" and not answer[:-1].endswith("\\"):
        answer = answer[:-1].rstrip()
    return answer or None


def _strip_math_delimiters(answer: str) -> str:
    for opening, closing in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if answer.startswith(opening) and answer.rstrip(" .").endswith(closing):
            inner = answer.rstrip(" .")[len(opening) : -len(closing)]
            if inner and not re.search(r"(?<!\\)" + re.escape(opening), inner):
                return inner.strip()
    return answer


# --- MATH normalisation rules that math-verify misses ------------------------------------------

_REPEATING_DECIMAL = re.compile(
    r"(?P<sign>-?)(?P<int>\d*)\.(?P<fixed>\d*)\\overline\{(?P<rep>\d+)\}"
)
_THIN_SPACE_THOUSANDS = re.compile(r"(?<=\d)(?:\\[,;: ]|~)\s*(?=\d{3}(?!\d))")
_TRAILING_WORDS = re.compile(r"^(?P<value>[^$]*?[\d}])\s+[A-Za-z]{2,}(?:\s+[A-Za-z]{2,})*$")


def normalise_answer(answer: str) -> str:
    """Rewrite MATH conventions that math-verify parses wrongly; each rule says why."""
    answer = _clean_answer(answer) or ""
    # math-verify reads `0.\overline{3}` as 0; MATH writes repeating decimals this way.
    answer = _REPEATING_DECIMAL.sub(_repeating_decimal_as_fraction, answer)
    # math-verify reads `10\,000` as 10*0; MATH and LaTeX users group thousands with thin spaces.
    answer = _THIN_SPACE_THOUSANDS.sub("", answer)
    # MATH graders ignore units; math-verify only strips units on its own list ("42 apples").
    answer = _drop_trailing_words(answer)
    return answer


def _drop_trailing_words(answer: str) -> str:
    match = _TRAILING_WORDS.match(answer)
    if match is None or re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", match["value"])):
        return answer  # the value itself has letters (2x, \text{..}): not a number with a unit
    return match["value"]


def _repeating_decimal_as_fraction(match: re.Match[str]) -> str:
    whole, fixed, repeating = match["int"] or "0", match["fixed"], match["rep"]
    # x = whole.fixed(repeating)...  =>  x = (whole fixed repeating - whole fixed) / (10^f (10^r - 1))
    numerator = int(whole + fixed + repeating) - int(whole + fixed)
    denominator = 10 ** len(fixed) * (10 ** len(repeating) - 1)
    value = Fraction(numerator, denominator)
    return f"{match['sign']}\\frac{{{value.numerator}}}{{{value.denominator}}}"


# --- equivalence ------------------------------------------------------------------------------


def is_equivalent(answer: str, ground_truth: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether `answer` equals `ground_truth` the way MATH graders judge it.

    Safe from any thread. Returns False, never raises or hangs, when either side is
    pathological (see the MAX_* guards) or the comparison takes longer than `timeout_s`.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    # Length first: the normalising regexes themselves are slow on huge inputs.
    if len(answer) > MAX_ANSWER_CHARS or len(ground_truth) > MAX_ANSWER_CHARS:
        return False
    answer_norm = normalise_answer(answer)
    truth_norm = normalise_answer(ground_truth)
    if not answer_norm or not truth_norm:
        return False
    if _is_pathological(answer_norm) or _is_pathological(truth_norm):
        logger.info(
            "Refusing to grade a pathological answer: %r vs %r", answer[:80], ground_truth[:80]
        )
        return False
    result = _call_with_time_limit(lambda: _verify(answer_norm, truth_norm), timeout_s)
    if result is None:
        logger.warning("Answer comparison timed out after %.1f s", timeout_s)
        return False
    return result


def grade_solution(
    steps_or_text: str | Sequence[str],
    ground_truth: str | None,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> GradeResult:
    answer = extract_answer(steps_or_text)
    if answer is None or ground_truth is None or not ground_truth.strip():
        return GradeResult(answer=answer, correct=None)
    return GradeResult(
        answer=answer, correct=is_equivalent(answer, ground_truth, timeout_s=timeout_s)
    )


def _verify(answer: str, ground_truth: str) -> bool:
    # Timeouts off: math-verify's are SIGALRM-based; _call_with_time_limit bounds the call instead.
    try:
        gold = parse(_as_math_verify_input(ground_truth), parsing_timeout=None)
        predicted = parse(_as_math_verify_input(answer), parsing_timeout=None)
        return bool(verify(gold, predicted, timeout_seconds=None))
    except Exception:  # math-verify mostly returns False itself; never let grading raise
        logger.exception("math-verify failed on %r vs %r", answer[:100], ground_truth[:100])
        return False


def _as_math_verify_input(answer: str) -> str:
    """math-verify's LaTeX extraction only looks inside math delimiters, so add them."""
    if re.search(r"(?<!\\)\$", answer):
        return answer  # already has its own math segments ("$5$ and $6$")
    # Inline `$...$` may not span lines in math-verify's patterns.
    return f"${' '.join(answer.split())}$"


def _is_pathological(answer: str) -> bool:
    return (
        len(answer) > MAX_ANSWER_CHARS
        or _nesting_depth(answer) > MAX_NESTING_DEPTH
        or _has_exponent_tower(answer)
        or re.search(rf"\^\s*\{{?\s*-?\d{{{MAX_EXPONENT_DIGITS + 1},}}", answer) is not None
        or re.search(rf"\d{{{MAX_FACTORIAL_DIGITS + 1},}}\s*!", answer) is not None
    )


def _nesting_depth(text: str) -> int:
    depth = deepest = 0
    for char in text:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth = max(depth - 1, 0)
    return deepest


def _has_exponent_tower(text: str) -> bool:
    """True for 10^{10^{10}}: towers of numbers explode even when every literal is small.
    A power of a symbol inside an exponent (e^{x^2}) is harmless and allowed."""
    for match in re.finditer(r"\^\s*\{", text):
        group = _balanced_group(text[match.end() - 1 :])
        if group is None or re.search(r"[\d)}\]]\s*\^", group):
            return True
    # `a^b^c` without braces (a LaTeX error that the parser reads as a tower)
    return re.search(r"\^\s*\w+\s*\^", text) is not None


# --- time limit that works off the main thread ---------------------------------------------------


class _TimeLimitExceeded(BaseException):
    """BaseException so that sympy's and math-verify's `except Exception` cannot swallow it."""


def _call_with_time_limit(func: Callable[[], T], timeout_s: float) -> T | None:
    """Run func; None if it did not finish within timeout_s."""
    if _can_use_alarm():
        return _call_with_alarm(func, timeout_s)
    return _call_in_daemon_thread(func, timeout_s)


def _can_use_alarm() -> bool:
    # Signals only reach the main thread; and we never clobber a timer someone else has set.
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    )


def _call_with_alarm(func: Callable[[], T], timeout_s: float) -> T | None:
    """Interrupts the computation itself, so nothing keeps running after a timeout."""

    def on_alarm(signum: int, frame: object) -> None:
        raise _TimeLimitExceeded

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout_s)
            return func()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _TimeLimitExceeded:
        return None
    finally:
        signal.signal(signal.SIGALRM, previous)


def _call_in_daemon_thread(func: Callable[[], T], timeout_s: float) -> T | None:
    """Off the main thread: wait at most timeout_s. A computation that overruns is abandoned
    and finishes in the background (a daemon thread, so it never blocks interpreter exit)."""
    results: list[T] = []

    def run() -> None:
        results.append(func())

    worker = threading.Thread(target=run, name="stepwise-grading", daemon=True)
    worker.start()
    worker.join(timeout_s)
    return results[0] if results else None
