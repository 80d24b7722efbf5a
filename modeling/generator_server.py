"""A minimal OpenAI-compatible completion server around a `Generator` (by default the local
SmolLM2): `GET /v1/models` and `POST /v1/completions`, JSON only, no streaming.

It exists so the demo and the tests exercise the real HTTP client path (`openai` package,
timeouts, retries) without a GPU or a download: `python manage.py serve_generator`. In
production run vLLM (`vllm serve MODEL`) or another OpenAI-compatible server instead.
llama.cpp's server (`llama-cpp-python[server]`) would serve the same GGUF, but it builds from
a 77 MB source archive with cmake on every fresh machine, which CI cannot afford.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from modeling.generator import Generator, Sampling

MAX_N = 64
MAX_TOKENS = 4096


class BadRequest(ValueError):
    pass


def completion_request(body: Any, served_model: str) -> tuple[list[str], int, Sampling, list[str]]:
    """Validate a /v1/completions body the way OpenAI's API does: prompts, n, sampling, stop."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    model = body.get("model")
    if model != served_model:
        raise LookupError(f"The model `{model}` does not exist; this server has `{served_model}`.")
    prompt = body.get("prompt")
    prompts = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise BadRequest("`prompt` must be a string or a non-empty list of strings")
    n = _number(body, "n", int, 1, low=1, high=MAX_N)
    max_tokens = _number(body, "max_tokens", int, 16, low=1, high=MAX_TOKENS)
    temperature = _number(body, "temperature", float, 1.0, low=0.0, high=2.0)
    top_p = _number(body, "top_p", float, 1.0, low=0.0, high=1.0)
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise BadRequest("`seed` must be an integer")
    stop = body.get("stop") or []
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise BadRequest("`stop` must be a string or a list of non-empty strings")
    if len(stops) > 4:
        raise BadRequest("`stop` takes at most 4 sequences")
    sampling = Sampling(max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed)
    return prompts, n, sampling, stops


def _number(body: dict, key: str, kind: type, default: Any, *, low: float, high: float) -> Any:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"`{key}` must be a number")
    if kind is int and value != int(value):
        raise BadRequest(f"`{key}` must be an integer")
    if not low <= value <= high:
        raise BadRequest(f"`{key}` must be between {low:g} and {high:g}")
    return kind(value)


def complete(
    generator: Generator, prompts: Sequence[str], n: int, sampling: Sampling, stop: Sequence[str]
) -> dict[str, Any]:
    """The /v1/completions answer: choice `i * n + j` is sample j of prompt i, as OpenAI's."""
    choices = []
    for prompt_index, prompt in enumerate(prompts):
        texts = generator.complete(prompt, n=n, sampling=sampling, stop=stop)
        for sample_index, text in enumerate(texts):
            choices.append(
                {
                    "index": prompt_index * n + sample_index,
                    "text": text.text,
                    "finish_reason": text.finish_reason,
                    "logprobs": None,
                }
            )
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": generator.name,
        "choices": choices,
    }


def make_server(
    generator: Generator, host: str = "127.0.0.1", port: int = 0
) -> ThreadingHTTPServer:
    """An HTTP server (not yet serving) answering for `generator`; port 0 picks a free one."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the openai client's pool expects

        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/v1/models":
                return self._error(HTTPStatus.NOT_FOUND, f"no route {self.path}")
            model = {"id": generator.name, "object": "model", "owned_by": "stepwise"}
            self._send(HTTPStatus.OK, {"object": "list", "data": [model]})

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/completions":
                return self._error(HTTPStatus.NOT_FOUND, f"no route {self.path}")
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"null")
                prompts, n, sampling, stop = completion_request(body, generator.name)
            except (ValueError, BadRequest) as exc:  # json.JSONDecodeError is a ValueError
                return self._error(HTTPStatus.BAD_REQUEST, str(exc))
            except LookupError as exc:
                return self._error(HTTPStatus.NOT_FOUND, str(exc))
            try:
                answer = complete(generator, prompts, n, sampling, stop)
            except Exception as exc:  # the model failed: the client sees a 500 and retries
                return self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"generation failed: {exc}")
            self._send(HTTPStatus.OK, answer)

        def _error(self, status: HTTPStatus, message: str) -> None:
            kind = "invalid_request_error" if status < 500 else "server_error"
            self._send(status, {"error": {"message": message, "type": kind, "code": status}})

        def _send(self, status: HTTPStatus, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib's name)
            pass  # one line per request on stderr would drown the command's own output

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server
