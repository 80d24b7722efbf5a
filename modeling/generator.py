"""The generator: the language model that writes solutions and candidate next steps.

One interface, two backends:

- `OpenAICompatibleGenerator`: any server with an OpenAI `/v1/completions` endpoint (vLLM,
  SGLang, TGI, llama.cpp's server, hosted APIs) through the `openai` package, which brings the
  timeouts and the retries with backoff; a semaphore caps the requests in flight.
- `LocalGenerator`: the offline SmolLM2-135M in this process (transformers), so the embedded
  default, the demo and the tests generate with no service.

Steps are separated by a blank line and a solution ends with PRM800K's `# Answer` section,
as in the release, so a generated solution splits into the same steps a labeler rates.
No Django here: settings are read in `modeling.services.sampling.generator_from_settings`.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from labeling.prm800k import ANSWER_HEADING, answer_section
from modeling.grading import extract_answer

STEP_SEPARATOR = "\n\n"
# Where a model that has answered goes on to invent the prompt's next problem.
NEXT_PROBLEM = "\n\nProblem:"

# A one-shot prompt in the release's format: a small model follows the example's blank-line
# steps and `# Answer` section far more often than an instruction alone.
PROMPT_TEMPLATE = (
    "Solve the problem step by step. Put each step in its own paragraph, separated by a blank "
    "line, and end with a line `# Answer` followed by the final answer.\n\n"
    "Problem: What is $2^3 + 4$?\n\n"
    "Solution:\n"
    "First I compute $2^3 = 8$.\n\n"
    "Then I add $4$: $8 + 4 = 12$.\n\n"
    "# Answer\n\n"
    "12\n\n"
    "Problem: {problem}\n\n"
    "Solution:\n"
)


class GeneratorError(Exception):
    """The generator could not answer (unreachable, timed out after its retries, refused)."""


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters, recorded with every generated solution."""

    max_tokens: int = 512
    temperature: float = 0.8
    top_p: float = 0.95
    seed: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Text:
    text: str
    # "stop" (a stop string or the end of text), "length" (cut at max_tokens) or "abandoned"
    # (stopped unfinished because `keep_going` said nobody waits for it any more).
    finish_reason: str


# Told each sample as it ends (its index among the n, its text).
OnText = Callable[[int, Text], None]
# Asked every few tokens whether anyone still waits for the samples; False stops them.
KeepGoing = Callable[[], bool]
# How often the local backend asks `keep_going`: a cheap query every ~0.3 s of decoding on CPU,
# and every LOCK_WAIT_CHECK_S while its samples wait for the model (one generate at a time).
CHECK_EVERY_TOKENS = 8
LOCK_WAIT_CHECK_S = 0.25


class Generator(Protocol):
    @property
    def name(self) -> str:
        """What Solution.generator records."""
        ...

    concurrency: int  # prompts worth sending at once

    def complete(
        self,
        prompt: str,
        *,
        n: int,
        sampling: Sampling,
        stop: Sequence[str] = (),
        on_text: OnText | None = None,
        keep_going: KeepGoing | None = None,
    ) -> list[Text]:
        """`n` samples continuing `prompt`, each cut before the first stop string. `on_text`
        hears of each sample as soon as it ends; once `keep_going()` says False, the samples
        not ended yet come back unfinished with finish_reason "abandoned"."""
        ...


# --- prompts and parsing ------------------------------------------------------------------------


def solution_prompt(problem: str, template: str = PROMPT_TEMPLATE) -> str:
    return template.format(problem=problem.strip())


def step_prompt(problem: str, prefix: Sequence[str], template: str = PROMPT_TEMPLATE) -> str:
    """The prompt whose continuation up to the next blank line is the next step after `prefix`."""
    return solution_prompt(problem, template) + "".join(step + STEP_SEPARATOR for step in prefix)


@dataclass
class SampledSolution:
    steps: list[str]
    final_answer: str | None
    finish_reason: str
    text: str = field(repr=False)

    @property
    def is_complete(self) -> bool:
        """Reached a final answer (a sample cut by max_tokens before it has none)."""
        return self.final_answer is not None


def split_solution(text: str) -> tuple[list[str], str | None]:
    """Steps and final answer of a generated solution. As in PRM800K's phase 2, the `# Answer`
    heading and the answer under it are one last step, and nothing after the answer counts;
    the heading is recognised by the labeling app's one rule (`prm800k.answer_section`)."""
    chunks = [chunk.strip() for chunk in text.split(STEP_SEPARATOR)]
    chunks = [chunk for chunk in chunks if chunk]
    steps: list[str] = []
    for position, chunk in enumerate(chunks):
        section = answer_section(chunk)
        if section is None:
            steps.append(chunk)
            continue
        if section.body:  # text before the heading in the same paragraph is a step of its own
            steps.append(section.body)
        answer = section.answer
        if not answer and position + 1 < len(chunks):
            answer = chunks[position + 1]
        if not answer:
            return steps, None
        steps.append(f"{ANSWER_HEADING}{STEP_SEPARATOR}{answer}")
        return steps, answer
    # No answer section: the solution may still state one (a \boxed{} in the last step).
    return steps, extract_answer(steps) if steps else None


# --- what the rest of the app asks for ------------------------------------------------------


@dataclass
class NextSteps:
    """A prefix's candidate next steps, and how many samples were dropped, by reason."""

    steps: list[str]
    # "duplicate" (of another candidate), "empty" (the model wrote the blank line at once, twice),
    # "cut" (at max_tokens: not a whole step), "abandoned" (stopped: nobody waited for it).
    dropped: Counter[str] = field(default_factory=Counter)


def next_steps(
    generator: Generator,
    *,
    problem: str,
    prefix: Sequence[str],
    k: int,
    sampling: Sampling,
    template: str = PROMPT_TEMPLATE,
    known: Sequence[str] = (),
    on_step: Callable[[list[str]], None] | None = None,
    keep_going: KeepGoing | None = None,
) -> NextSteps:
    """Up to `k` distinct candidate next steps after `prefix` (PRM800K phase 1's completions),
    the `known` ones first (a request resumed: the new ones only append).

    The k samples are one batch; `on_step(steps)` hears of the list each time a candidate joins
    it, as its sample ends, so a page can show it while the others are written. A sample that
    opens the answer section is completed through the answer after the batch, so a candidate
    final step always carries the answer it gives; empty samples are drawn once more."""
    prompt = step_prompt(problem, prefix, template)
    found = NextSteps(list(known))
    headings: list[str] = []
    empty = 0

    def add(step: str) -> None:
        if step in found.steps:
            found.dropped["duplicate"] += 1
            return
        found.steps.append(step)
        if on_step is not None:
            on_step(list(found.steps))

    def take(_: int, text: Text) -> None:
        nonlocal empty
        step = text.text.strip()
        if text.finish_reason in ("length", "abandoned"):
            found.dropped["cut" if text.finish_reason == "length" else "abandoned"] += 1
        elif not step:
            empty += 1
        elif (section := answer_section(step)) is not None and not section.answer:
            headings.append(step)  # cut at the heading's blank line: its answer comes after
        else:
            add(step)

    def draw(n: int, seeded: Sampling) -> None:
        generator.complete(
            prompt,
            n=n,
            sampling=seeded,
            stop=(STEP_SEPARATOR,),
            on_text=take,
            keep_going=keep_going,
        )

    wanted = k - len(found.steps)
    if wanted <= 0:
        return found
    draw(wanted, sampling)
    if empty and not found.dropped["abandoned"]:
        again, empty = empty, 0
        # Once: a model that keeps writing nothing gives fewer candidates. A seeded draw moves
        # to the next seed, or it would draw the same empty samples again.
        reseeded = sampling if sampling.seed is None else replace(sampling, seed=sampling.seed + 1)
        draw(again, reseeded)
    if empty:
        found.dropped["empty"] += empty
    for heading in headings:
        if found.dropped["abandoned"] or (keep_going is not None and not keep_going()):
            found.dropped["abandoned"] += 1
            continue
        answer = generator.complete(
            prompt + heading + STEP_SEPARATOR, n=1, sampling=sampling, stop=(STEP_SEPARATOR,)
        )[0].text.strip()
        if answer:
            add(f"{heading}{STEP_SEPARATOR}{answer}")
        else:
            found.dropped["empty"] += 1
    return found


def sample_solutions(
    generator: Generator,
    *,
    problem: str,
    n: int,
    sampling: Sampling,
    template: str = PROMPT_TEMPLATE,
) -> list[SampledSolution]:
    """`n` whole solutions to `problem`, split into steps."""
    samples = generator.complete(
        solution_prompt(problem, template), n=n, sampling=sampling, stop=(NEXT_PROBLEM,)
    )
    solutions = []
    for sample in samples:
        steps, answer = split_solution(sample.text)
        solutions.append(SampledSolution(steps, answer, sample.finish_reason, sample.text))
    return solutions


def map_concurrently(
    generator: Generator, work: Callable[[Any], Any], items: Sequence[Any]
) -> list[Any]:
    """`work(item)` for every item, `generator.concurrency` at a time, results in order."""
    if generator.concurrency <= 1 or len(items) <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=generator.concurrency) as pool:
        return list(pool.map(work, items))


# --- backends -----------------------------------------------------------------------------------


class OpenAICompatibleGenerator:
    """A completion server reached over HTTP with the `openai` client.

    `model` empty means the server's only (first) model, read from `/v1/models` once, which is
    what `vllm serve MODEL` and llama.cpp's server offer."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str = "",
        api_key: str = "",
        timeout_s: float = 60.0,
        max_retries: int = 3,
        concurrency: int = 8,
    ) -> None:
        from openai import OpenAI

        self.base_url = base_url
        self.concurrency = max(1, concurrency)
        # The client retries connection errors, 408, 409, 429 and 5xx with exponential backoff.
        self._client = OpenAI(
            base_url=base_url,
            api_key=api_key or "not-needed",  # local servers ignore it; the client needs one
            timeout=timeout_s,
            max_retries=max_retries,
        )
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self._model = model

    @property
    def name(self) -> str:
        return self.model

    @property
    def model(self) -> str:
        if not self._model:
            models = self._call(lambda: self._client.models.list())
            first = next(iter(models.data), None)
            if first is None:
                raise GeneratorError(f"the generator at {self.base_url} serves no model")
            self._model = first.id
        return self._model

    def complete(
        self,
        prompt: str,
        *,
        n: int,
        sampling: Sampling,
        stop: Sequence[str] = (),
        on_text: OnText | None = None,
        keep_going: KeepGoing | None = None,
    ) -> list[Text]:
        # One answer for the n samples, told to `on_text` when it arrives: streaming each
        # choice (`stream=True`) would need a streaming server, and serve_generator is not one.
        # So `keep_going` is asked once, before the request: a request sent runs to its end.
        if keep_going is not None and not keep_going():
            texts = [Text("", "abandoned")] * n
        else:
            texts = self._complete(prompt, n=n, sampling=sampling, stop=stop)
        if on_text is not None:
            for index, text in enumerate(texts):
                on_text(index, text)
        return texts

    def _complete(
        self, prompt: str, *, n: int, sampling: Sampling, stop: Sequence[str]
    ) -> list[Text]:
        model = self.model
        response = self._call(
            lambda: self._client.completions.create(
                model=model,
                prompt=prompt,
                n=n,
                max_tokens=sampling.max_tokens,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                seed=sampling.seed,
                stop=list(stop) or None,
            )
        )
        choices = sorted(response.choices, key=lambda choice: choice.index)
        return [Text(choice.text, choice.finish_reason or "stop") for choice in choices]

    def _call(self, request: Callable[[], Any]) -> Any:
        import openai

        with self._slots:
            try:
                return request()
            except openai.APIStatusError as exc:
                raise GeneratorError(
                    f"the generator at {self.base_url} answered {exc.status_code}: {exc.message}"
                ) from exc
            except openai.APIError as exc:  # connection refused, timed out after the retries
                raise GeneratorError(f"the generator at {self.base_url} failed: {exc}") from exc


class LocalGenerator:
    """A causal LM run in this process: by default the offline SmolLM2-135M-Instruct.

    Loaded on first use and shared by the threads of the process (one generate at a time)."""

    concurrency = 1

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        device: str = "cpu",
        encode_prompt_once: bool = True,
        int8: bool = True,
    ) -> None:
        self._model_dir = model_dir
        self._device = device
        # On a CPU, decoding reads every weight once per token: int8 linear layers read a
        # quarter of float32's bytes (SmolLM2 on 2 cores: 162 -> 72 ms a step for 5 samples).
        self.int8 = int8 and device == "cpu"
        # False: the prompt copied per sample (`num_return_sequences`), as before; benchmarks
        # compare the two.
        self.encode_prompt_once = encode_prompt_once
        self._lock = threading.Lock()
        self._loaded: tuple[Any, Any] | None = None
        self._blank_tokens: list[int] = []
        self.name = f"{Path(model_dir).name if model_dir else 'SmolLM2-135M-Instruct'} (local)"

    def _load(self) -> tuple[Any, Any]:
        if self._loaded is None:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            from modeling.training.backbones import smollm2_folder

            folder = self._model_dir or smollm2_folder()
            tokenizer = AutoTokenizer.from_pretrained(
                folder, local_files_only=True, trust_remote_code=False
            )
            model = AutoModelForCausalLM.from_pretrained(
                folder, local_files_only=True, trust_remote_code=False
            )
            model.to(self._device)  # type: ignore[arg-type]  # transformers' stub is wrong here
            model = model.eval()
            if self.int8:
                model = _int8_linear_layers(model)
            # Tokens that are only whitespace: a sample never starts with one (below).
            self._blank_tokens = [
                token_id
                for token, token_id in tokenizer.get_vocab().items()
                if not tokenizer.convert_tokens_to_string([token]).strip()
            ]
            self._loaded = (tokenizer, model)
        return self._loaded

    def complete(
        self,
        prompt: str,
        *,
        n: int,
        sampling: Sampling,
        stop: Sequence[str] = (),
        on_text: OnText | None = None,
        keep_going: KeepGoing | None = None,
    ) -> list[Text]:
        """The n samples are one batch over one encoding of the prompt (`_prompt_once`);
        `on_text` hears of each at the decoding step it ends, while the others go on."""
        if self._wait_for_model(keep_going):
            try:
                return self._generate(prompt, n, sampling, stop, on_text, keep_going)
            finally:
                self._lock.release()
        texts = [Text("", "abandoned")] * n
        if on_text is not None:
            for index, text in enumerate(texts):
                on_text(index, text)
        return texts

    def _wait_for_model(self, keep_going: KeepGoing | None) -> bool:
        """Take the model (one generate at a time) once it is free; False, without it, as soon
        as `keep_going` says nobody waits for the samples any more (a request cancelled in the
        queue behind another's generation ends within LOCK_WAIT_CHECK_S)."""
        while not self._lock.acquire(timeout=LOCK_WAIT_CHECK_S):
            if keep_going is not None and not keep_going():
                return False
        return True

    def _generate(
        self,
        prompt: str,
        n: int,
        sampling: Sampling,
        stop: Sequence[str],
        on_text: OnText | None,
        keep_going: KeepGoing | None,
    ) -> list[Text]:
        import torch

        tokenizer, model = self._load()
        inputs = tokenizer(prompt, return_tensors="pt").to(self._device)
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        sample = sampling.temperature > 0
        watch = _SampleWatch(
            tokenizer,
            prompt_length=inputs["input_ids"].shape[1],
            n=n,
            max_tokens=sampling.max_tokens,
            stop=stop,
            on_text=on_text,
            keep_going=keep_going,
        )
        with torch.inference_mode():
            batch = (
                _prompt_once(model, inputs["input_ids"], n)
                if self.encode_prompt_once
                else {**inputs, "num_return_sequences": n}
            )
            output = model.generate(
                **batch,
                do_sample=sample,
                temperature=sampling.temperature if sample else None,
                top_p=sampling.top_p if sample else None,
                top_k=None,
                max_new_tokens=sampling.max_tokens,
                stopping_criteria=[watch],  # the stop strings are its to check
                pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
                # A sample that starts with the blank line (or ends at once) is an empty
                # step, dropped and drawn again: never let one start that way.
                begin_suppress_tokens=[*self._blank_tokens, tokenizer.eos_token_id],
            )
        return watch.texts(output)


def _int8_linear_layers(model: Any) -> Any:
    """The model with its linear layers int8 (weights quantized once, activations per pass:
    PyTorch's dynamic quantization, fbgemm kernels). SmolLM2's weights come from a 4-bit GGUF,
    so int8 keeps what they hold. Where this PyTorch has no such API, the float model."""
    import warnings

    import torch

    try:
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError:  # a PyTorch without the eager API (it moves to torchao)
        return model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its deprecation notice, once per load
        # Per output channel: per tensor, SmolLM2 began 9 of 30 samples with the blank line
        # (float32: 0), per channel 6; with blank first tokens suppressed (`complete`), none.
        return quantize_dynamic(
            model, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
        )


def _prompt_once(model: Any, prompt_ids: Any, n: int) -> dict[str, Any]:
    """generate's inputs for n samples of one prompt, the prompt encoded once.

    `num_return_sequences=n` would copy the prompt n times before the first pass: on a CPU
    that pass is most of the wait for the first candidate (five copies of a 400-token prompt
    for SmolLM2). Here all but the prompt's last token go through the model once and the cache
    is copied n times; generate runs the last token for each sample and samples from there."""
    import torch
    from transformers import DynamicCache

    rows = prompt_ids.repeat(n, 1)
    attention_mask = torch.ones_like(rows)
    if prompt_ids.shape[1] < 2:
        return {"input_ids": rows, "attention_mask": attention_mask}
    cache = DynamicCache(config=model.config)
    model(input_ids=prompt_ids[:, :-1], past_key_values=cache, use_cache=True)
    cache.batch_repeat_interleave(n)
    return {"input_ids": rows, "attention_mask": attention_mask, "past_key_values": cache}


class _SampleWatch:
    """A stopping criterion for `model.generate` over a batch of samples of one prompt: it ends
    each row at its first stop string, the end of text or max_tokens, tells `on_text` the step
    a row ends, and ends every row once `keep_going` (asked every CHECK_EVERY_TOKENS tokens and
    as a row ends) says nobody waits for them. Ended rows are padded by generate until all are."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        prompt_length: int,
        n: int,
        max_tokens: int,
        stop: Sequence[str],
        on_text: OnText | None,
        keep_going: KeepGoing | None,
    ) -> None:
        from transformers import StopStringCriteria

        self._tokenizer = tokenizer
        self._prompt_length = prompt_length
        self._max_tokens = max_tokens
        self._stop = list(stop)
        self._stop_strings = StopStringCriteria(tokenizer, self._stop) if stop else None
        self._eos = tokenizer.eos_token_id
        self._on_text = on_text
        self._keep_going = keep_going
        self._ended: list[Text | None] = [None] * n

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        generated = input_ids.shape[1] - self._prompt_length
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        if self._stop_strings is not None:
            done |= self._stop_strings(input_ids, scores)
        if self._eos is not None:
            done |= input_ids[:, -1] == self._eos
        ended_now = False
        for row, ended in enumerate(self._ended):
            if ended is None and (done[row] or generated >= self._max_tokens):
                self._end(row, input_ids[row], "stop" if done[row] else "length")
                ended_now = True
        # Asked after the prompt's pass (a request may have waited for the model meanwhile),
        # then every CHECK_EVERY_TOKENS tokens, and as soon as a sample ends (its candidate is
        # shown: the labeler may act on it).
        ask = ended_now or generated % CHECK_EVERY_TOKENS == 1
        going = [row for row, ended in enumerate(self._ended) if ended is None]
        if self._keep_going is None or not going or not ask or self._keep_going():
            return done
        for row in going:
            self._end(row, input_ids[row], "abandoned")
        return torch.ones_like(done)

    def _end(self, row: int, sequence: Any, reason: str) -> None:
        text = self._tokenizer.decode(sequence[self._prompt_length :], skip_special_tokens=True)
        for separator in self._stop:  # the server contract: the stop string is not returned
            if separator in text:
                text, reason = text[: text.index(separator)], "stop"
        ended = self._ended[row] = Text(text, reason)
        if self._on_text is not None:
            self._on_text(row, ended)

    def texts(self, output: Any) -> list[Text]:
        """Every row's text; a row generate ended without asking (none should) is read here."""
        for row, ended in enumerate(self._ended):
            if ended is None:
                self._end(row, output[row], "length")
        return [text for text in self._ended if text is not None]
