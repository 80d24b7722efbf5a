"""The generator: parsing, the local SmolLM2 backend, and the OpenAI client against a real
OpenAI-compatible server process on loopback (manage.py serve_generator)."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import httpx2  # the HTTP client the openai package is built on
import pytest

from labeling.prm800k import answer_section, is_final_step
from modeling.generator import (
    STEP_SEPARATOR,
    GeneratorError,
    LocalGenerator,
    OpenAICompatibleGenerator,
    Sampling,
    Text,
    map_concurrently,
    next_steps,
    sample_solutions,
    split_solution,
    step_prompt,
)
from modeling.services import sampling as sampling_service

LOCAL_NAME = "SmolLM2-135M-Instruct (local)"
PROBLEM = "What is $3 \\cdot 5 + 1$?"


@pytest.fixture(scope="module")
def local():
    return LocalGenerator()


# --- parsing ------------------------------------------------------------------------------------


def test_split_solution_keeps_the_answer_section_as_one_last_step_like_prm800k():
    text = "I add: $2 + 2 = 4$.\n\nSo it is $4$.\n\n# Answer\n\n4\n\nProblem: next one"
    steps, answer = split_solution(text)
    assert steps == ["I add: $2 + 2 = 4$.", "So it is $4$.", "# Answer\n\n4"]
    assert answer == "4"
    assert is_final_step(steps[-1]) and not is_final_step(steps[0])


def test_split_solution_reads_an_answer_on_the_heading_line_and_a_boxed_one():
    assert split_solution("Step one.\n\n# Answer 12") == (["Step one.", "# Answer\n\n12"], "12")
    assert split_solution("So the sum is $\\boxed{7}$.") == (["So the sum is $\\boxed{7}$."], "7")


def test_split_solution_without_an_answer_has_none():
    assert split_solution("I start.\n\n# Answer\n\n") == (["I start."], None)
    assert split_solution("   ") == ([], None)


def test_split_solution_finds_the_answer_heading_by_the_labeling_rule(shared_data):
    # Text and heading in one paragraph: the text is a step, the answer the last one.
    assert split_solution("So $x = 4$.\n# Answer\n4") == (["So $x = 4$.", "# Answer\n\n4"], "4")
    assert split_solution("So $x = 4$.\r\n# Answer\r\n4") == (
        ["So $x = 4$.", "# Answer\n\n4"],
        "4",
    )
    # The release's pre-generated solutions split back into their steps and answer; a last
    # step with text before its answer (the screening line's) comes back as two paragraphs.
    shapes = set()
    for line in (shared_data / "prm800k" / "samples.jsonl").read_text().splitlines():
        question = json.loads(line)["question"]
        steps = question.get("pre_generated_steps")
        if not steps:
            continue
        assert is_final_step(steps[-1]) and not any(is_final_step(s) for s in steps[:-1])
        section = answer_section(steps[-1])
        assert section is not None and section.answer == question["pre_generated_answer"]
        shapes.add(bool(section.body))
        expected = [*steps[:-1], *([section.body] if section.body else [])]
        assert split_solution("\n\n".join(steps)) == (
            [*expected, f"# Answer\n\n{section.answer}"],
            question["pre_generated_answer"],
        )
    assert shapes == {True, False}


def test_step_prompt_ends_each_prefix_step_with_the_separator():
    prompt = step_prompt("P?", ["a", "b"])
    assert prompt.endswith("Problem: P?\n\nSolution:\na\n\nb\n\n")


# --- the local backend --------------------------------------------------------------------------


def test_local_backend_is_reproducible_with_a_seed_and_cuts_at_the_stop_string(local):
    sampling = Sampling(max_tokens=40, temperature=0.9, seed=11)
    first = local.complete(step_prompt(PROBLEM, []), n=3, sampling=sampling, stop=("\n\n",))
    again = local.complete(step_prompt(PROBLEM, []), n=3, sampling=sampling, stop=("\n\n",))
    assert [t.text for t in first] == [t.text for t in again]
    assert len(first) == 3
    assert all("\n\n" not in t.text for t in first)
    assert {t.finish_reason for t in first} <= {"stop", "length"}


def test_local_backend_tells_each_sample_as_it_ends_while_the_others_go_on(local):
    told: list[tuple[int, Text]] = []
    checks: list[int] = []  # how many samples had been told at each `keep_going` check

    def keep_going() -> bool:
        checks.append(len(told))
        return True

    sampling = Sampling(max_tokens=48, temperature=0.9, seed=11)
    prompt = step_prompt(PROBLEM, [])
    texts = local.complete(
        prompt,
        n=4,
        sampling=sampling,
        stop=("\n\n",),
        on_text=lambda row, text: told.append((row, text)),
        keep_going=keep_going,
    )
    assert sorted(row for row, _ in told) == [0, 1, 2, 3]  # each sample once
    assert dict(told) == dict(enumerate(texts))
    # Told during the batch: a check, between decoding steps, saw some told and some not.
    assert any(0 < count < 4 for count in checks), checks
    # Listening changes nothing of what is sampled.
    assert texts == local.complete(prompt, n=4, sampling=sampling, stop=("\n\n",))


def test_local_backend_encodes_the_prompt_once_for_all_samples_and_samples_the_same():
    import torch

    # Float weights: int8 quantizes activations per pass, so there the split prompt moves the
    # numbers a little; the float model shows the two ways compute the same thing.
    local = LocalGenerator(int8=False)
    tokenizer, model = local._load()
    prompt = step_prompt(PROBLEM, ["First we multiply."])
    prompt_length = tokenizer(prompt, return_tensors="pt")["input_ids"].shape[1]
    passes: list[tuple[int, int]] = []  # (rows, tokens) of each forward pass
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: passes.append(tuple(kwargs["input_ids"].shape)),
        with_kwargs=True,
    )
    try:
        texts = local.complete(prompt, n=3, sampling=Sampling(max_tokens=6, temperature=0))
    finally:
        hook.remove()
    # The prompt once (all but its last token), then one token per sample per decoding step.
    assert passes[0] == (1, prompt_length - 1)
    assert all(shape == (3, 1) for shape in passes[1:]), passes
    # What it samples is what n copies of the prompt give (greedy: exactly).
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"].repeat(3, 1)
    with torch.inference_mode():
        copies = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=6,
            pad_token_id=tokenizer.eos_token_id,
            begin_suppress_tokens=[*local._blank_tokens, tokenizer.eos_token_id],
        )
    assert [t.text for t in texts] == [
        tokenizer.decode(row[prompt_length:], skip_special_tokens=True) for row in copies
    ]


def test_local_backend_runs_int8_linear_layers_on_the_cpu_unless_told_not_to(local):
    import torch

    _, model = local._load()
    layer = model.model.layers[0].self_attn.q_proj
    assert isinstance(layer, torch.ao.nn.quantized.dynamic.Linear)
    assert layer.weight().dtype == torch.qint8
    assert layer.weight().qscheme() == torch.per_channel_affine
    assert LocalGenerator(int8=False).int8 is False
    assert LocalGenerator(device="cuda").int8 is False  # a GPU has the bandwidth: float


def test_local_backend_never_starts_a_sample_with_a_blank_line(local):
    tokenizer, _ = local._load()
    assert tokenizer.convert_tokens_to_ids(tokenizer.tokenize("\n\n")[0]) in local._blank_tokens
    for seed in range(3):
        texts = local.complete(
            step_prompt(PROBLEM, ["First we multiply."]),
            n=5,
            sampling=Sampling(max_tokens=4, temperature=1.5, seed=seed),
            stop=("\n\n",),
        )
        assert all(text.text.strip() for text in texts), texts


def test_local_backend_stops_every_sample_once_nobody_waits(local):
    asked: list[bool] = []

    def nobody_waits() -> bool:
        asked.append(False)
        return False

    texts = local.complete(
        step_prompt(PROBLEM, []),
        n=3,
        sampling=Sampling(max_tokens=64, temperature=0.9, seed=11),
        stop=("\n\n",),
        keep_going=nobody_waits,
    )
    assert len(asked) == 1  # asked at the first token, and it stopped there
    assert "abandoned" in {text.finish_reason for text in texts}
    assert {text.finish_reason for text in texts} <= {"stop", "abandoned"}


def test_next_steps_are_distinct_single_steps(local):
    found = next_steps(
        local, problem=PROBLEM, prefix=[], k=5, sampling=Sampling(max_tokens=48, seed=3)
    )
    steps = found.steps
    assert 1 <= len(steps) <= 5
    assert len(steps) + sum(found.dropped.values()) == 5  # each sample missing has its reason
    assert len(set(steps)) == len(steps)
    for step in steps:
        assert step == step.strip() and step
        # A candidate answer step carries its answer; any other candidate is one paragraph.
        assert STEP_SEPARATOR not in step or is_final_step(step)


def test_sample_solutions_split_into_steps(local):
    solutions = sample_solutions(
        local, problem=PROBLEM, n=2, sampling=Sampling(max_tokens=96, seed=5)
    )
    assert len(solutions) == 2
    for solution in solutions:
        assert solution.steps == split_solution(solution.text)[0]
        assert solution.is_complete == (solution.final_answer is not None)


@pytest.fixture
def scripted():
    """An OpenAI-compatible server on loopback that answers each completion request with the
    next scripted choices, (text, finish_reason) pairs; `requests` records what was asked."""
    answers: list[list[tuple[str, str]]] = []
    requests: list[dict] = []

    class Scripted(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            choices = [
                {"index": index, "text": text, "finish_reason": reason, "logprobs": None}
                for index, (text, reason) in enumerate(answers.pop(0))
            ]
            body = json.dumps(
                {"id": "c", "object": "text_completion", "created": 0, "model": "m"}
                | {"choices": choices}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = OpenAICompatibleGenerator(
        base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", model="m", max_retries=0
    )
    yield SimpleNamespace(client=client, answers=answers, requests=requests)
    server.shutdown()


def test_next_steps_say_why_fewer_than_k_came_and_draw_an_empty_sample_once_more(scripted):
    scripted.answers.extend(
        [
            [
                ("I add.", "stop"),
                (" I add. ", "stop"),  # the same step
                ("", "stop"),  # the blank line at once
                ("# Answer", "stop"),  # cut at the heading's blank line: its answer follows
                ("I start a long", "length"),  # not a whole step
            ],
            [("I multiply.", "stop")],  # the empty sample, drawn once more
            [("5", "stop")],  # the heading's answer
        ]
    )
    shown: list[list[str]] = []
    found = next_steps(
        scripted.client,
        problem="P?",
        prefix=["First."],
        k=5,
        sampling=Sampling(max_tokens=8),
        on_step=shown.append,
    )
    assert found.steps == ["I add.", "I multiply.", "# Answer\n\n5"]
    assert found.dropped == {"duplicate": 1, "cut": 1}
    assert shown == [found.steps[:1], found.steps[:2], found.steps]  # appended as found
    assert [request["n"] for request in scripted.requests] == [5, 1, 1]
    assert scripted.requests[2]["prompt"].endswith("First.\n\n# Answer\n\n")


def test_next_steps_go_on_after_known_ones_and_give_up_on_twice_empty_or_unwanted(scripted):
    scripted.answers.extend([[("", "stop"), ("I add.", "stop")], [("  ", "stop")]])
    sampling = Sampling(max_tokens=8)
    found = next_steps(
        scripted.client, problem="P?", prefix=[], k=3, sampling=sampling, known=["Known."]
    )
    assert found.steps == ["Known.", "I add."] and found.dropped == {"empty": 1}
    assert [request["n"] for request in scripted.requests] == [2, 1]  # k less the known one

    nobody = next_steps(
        scripted.client, problem="P?", prefix=[], k=3, sampling=sampling, keep_going=lambda: False
    )
    assert nobody.steps == [] and nobody.dropped == {"abandoned": 3}
    assert len(scripted.requests) == 2  # nothing sent for a prefix nobody waits for


# --- the HTTP client against a real server ------------------------------------------------------


def test_client_finds_the_served_model_and_matches_the_backend_sample_for_sample(
    generator_server, local
):
    client = OpenAICompatibleGenerator(base_url=generator_server)
    assert client.name == LOCAL_NAME  # read from /v1/models
    sampling = Sampling(max_tokens=32, temperature=0.9, seed=21)
    prompt = step_prompt(PROBLEM, ["First I compute $3 \\cdot 5 = 15$."])
    over_http = client.complete(prompt, n=2, sampling=sampling, stop=("\n\n",))
    in_process = local.complete(prompt, n=2, sampling=sampling, stop=("\n\n",))
    assert over_http == in_process


def test_server_answers_several_prompts_in_openai_order(generator_server):
    response = httpx2.post(
        f"{generator_server}/completions",
        json={"model": LOCAL_NAME, "prompt": ["One", "Two"], "n": 2, "max_tokens": 3, "seed": 1},
        timeout=120,
    )
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "text_completion"
    assert [choice["index"] for choice in body["choices"]] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"model": LOCAL_NAME, "prompt": "x", "n": 0}, "`n` must be between 1 and 64"),
        ({"model": LOCAL_NAME, "prompt": []}, "`prompt` must be a string"),
        ({"model": LOCAL_NAME, "prompt": "x", "stop": [""]}, "`stop` must be"),
        ({"model": LOCAL_NAME, "prompt": "x", "temperature": "hot"}, "`temperature` must be"),
        ([1, 2], "the body must be a JSON object"),
    ],
)
def test_server_refuses_a_malformed_request_with_a_clear_400(generator_server, body, message):
    response = httpx2.post(f"{generator_server}/completions", json=body, timeout=30)
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]


def test_client_reports_an_unknown_model_and_a_refused_request_as_generator_errors(
    generator_server,
):
    client = OpenAICompatibleGenerator(base_url=generator_server, model="gpt-nope", max_retries=0)
    with pytest.raises(GeneratorError, match="answered 404: .*gpt-nope"):
        client.complete("x", n=1, sampling=Sampling(max_tokens=2))
    client = OpenAICompatibleGenerator(base_url=generator_server, max_retries=0)
    with pytest.raises(GeneratorError, match="answered 400"):
        client.complete("x", n=999, sampling=Sampling(max_tokens=2))


def test_client_gives_up_on_a_closed_port_after_its_retries():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = OpenAICompatibleGenerator(
        base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1
    )
    with pytest.raises(GeneratorError, match=f"127.0.0.1:{port}/v1 failed: Connection error"):
        client.complete("x", n=1, sampling=Sampling(max_tokens=2))


def test_client_times_out_on_a_server_that_never_answers():
    # A socket that accepts connections and never writes: the client's timeout ends the wait.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        client = OpenAICompatibleGenerator(
            base_url=f"http://127.0.0.1:{port}/v1", model="m", timeout_s=0.5, max_retries=0
        )
        with pytest.raises(GeneratorError, match="timed out"):
            client.complete("x", n=1, sampling=Sampling(max_tokens=2))


def test_concurrency_cap_keeps_requests_beyond_it_waiting():
    """Five requests, two slots: a server that holds each request until told shows at most two
    in flight, and every request is answered in the end."""
    import json
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    state = {"in_flight": 0, "most": 0, "arrived": 0}
    lock, go = threading.Condition(), threading.Semaphore(0)

    class Holding(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                state["in_flight"] += 1
                state["arrived"] += 1
                state["most"] = max(state["most"], state["in_flight"])
                lock.notify_all()
            go.acquire()
            with lock:
                state["in_flight"] -= 1
            body = json.dumps(
                {
                    "id": "c",
                    "object": "text_completion",
                    "created": 0,
                    "model": "m",
                    "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}],
                }
            )
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Holding)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = OpenAICompatibleGenerator(
        base_url=f"http://127.0.0.1:{server.server_address[1]}/v1", model="m", concurrency=2
    )
    try:
        answers = []
        callers = [
            threading.Thread(
                target=lambda: answers.append(client.complete("x", n=1, sampling=Sampling()))
            )
            for _ in range(5)
        ]
        for caller in callers:
            caller.start()

        def arrived(count):
            with lock:
                return lock.wait_for(lambda: state["arrived"] >= count, timeout=60)

        assert arrived(2)  # both slots taken
        for answered in range(1, 6):  # let one go; the next waiting request takes its slot
            go.release()
            if answered + 2 <= 5:
                assert arrived(answered + 2)
        for caller in callers:
            caller.join(timeout=60)
        assert len(answers) == 5 and all(a[0].text == "ok" for a in answers)
        assert state["most"] == 2
    finally:
        for _ in range(5):
            go.release()
        server.shutdown()


def test_map_concurrently_keeps_the_order_of_its_items():
    client = OpenAICompatibleGenerator(base_url="http://127.0.0.1:9/v1", model="m", concurrency=4)
    seen_threads = set()

    def work(item):
        seen_threads.add(threading.get_ident())
        return item * 2

    assert map_concurrently(client, work, list(range(20))) == [i * 2 for i in range(20)]


# --- the app's settings -------------------------------------------------------------------------


def test_settings_choose_the_server_when_a_url_is_set(generator_server, settings):
    sampling_service.generator_from_settings.cache_clear()
    settings.STEPWISE_GENERATOR_URL = generator_server
    settings.STEPWISE_GENERATOR_STEP_MAX_TOKENS = 24
    try:
        name, found = sampling_service.propose_next_steps(problem=PROBLEM, prefix=[], k=3)
        assert name == LOCAL_NAME
        assert len(found.steps) + sum(found.dropped.values()) == 3
        assert isinstance(sampling_service.generator_from_settings(), OpenAICompatibleGenerator)
    finally:
        sampling_service.generator_from_settings.cache_clear()


def test_settings_without_a_url_use_the_local_backend(settings):
    sampling_service.generator_from_settings.cache_clear()
    settings.STEPWISE_GENERATOR_URL = ""
    try:
        assert isinstance(sampling_service.generator_from_settings(), LocalGenerator)
    finally:
        sampling_service.generator_from_settings.cache_clear()
