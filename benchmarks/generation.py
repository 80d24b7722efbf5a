"""The generator on this machine: pool throughput, and how long a labeler waits for candidates.

    python -m benchmarks.generation                    # local SmolLM2, in-process and over HTTP
    python -m benchmarks.generation --problems 8 --samples 8 --max-tokens 384
    python -m benchmarks.generation --url http://gpu-host:8000/v1   # a vLLM server instead

Part 1, pool throughput: `sample_solutions` on MATH500 problems, N samples each: solutions per
minute and generated tokens per second, in-process and through `manage.py serve_generator`
(the OpenAI client path), with the ratio of the two (the cost of the HTTP path).

Part 2, the alternatives protocol: a simulated labeler walks a path, at each step asking for k
candidate next steps for the prefix it chose. The page asks for them AHEAD: as soon as the
labeler rates a candidate +1, the candidates after it are requested, so the labeler waits only
for what generation takes beyond the time they spend on the rest of the step (reading and
rating the other candidates, choosing). Reported: the latency of one candidate set
(= the wait with nothing generated ahead, as for the first step of a claim) and the wait with
generation ahead for a head start of --head-start-s seconds, p50 and p95.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._setup import shared_data

REPO = Path(__file__).resolve().parents[1]


def problems(count: int) -> list[str]:
    with open(shared_data() / "math" / "math500.jsonl") as lines:
        return [json.loads(line)["problem"] for _, line in zip(range(count), lines, strict=False)]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def token_counter():
    from transformers import AutoTokenizer

    from modeling.training.backbones import smollm2_folder

    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder(), local_files_only=True)
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def pool_throughput(generator, texts: list[str], samples: int, sampling, count_tokens) -> dict:
    from modeling.generator import map_concurrently, sample_solutions

    start = time.perf_counter()
    batches = map_concurrently(
        generator,
        lambda problem: sample_solutions(generator, problem=problem, n=samples, sampling=sampling),
        texts,
    )
    seconds = time.perf_counter() - start
    solutions = [solution for batch in batches for solution in batch]
    tokens = sum(count_tokens(solution.text) for solution in solutions)
    return {
        "solutions": len(solutions),
        "complete": sum(solution.is_complete for solution in solutions),
        "seconds": seconds,
        "solutions_per_min": 60 * len(solutions) / seconds,
        "tokens_per_s": tokens / seconds,
    }


def candidate_latencies(generator, texts: list[str], k: int, steps: int, sampling) -> list[float]:
    """Seconds per candidate set along simulated paths (the labeler takes the first candidate)."""
    from labeling.prm800k import is_final_step
    from modeling.generator import next_steps

    latencies = []
    for problem in texts:
        prefix: list[str] = []
        for _ in range(steps):
            start = time.perf_counter()
            candidates = next_steps(
                generator, problem=problem, prefix=prefix, k=k, sampling=sampling
            )
            latencies.append(time.perf_counter() - start)
            if not candidates or is_final_step(candidates[0]):
                break
            prefix.append(candidates[0])
    return latencies


def start_server() -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "manage.py", "serve_generator", "--port", "0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("Serving "):
        process.kill()
        raise SystemExit(f"serve_generator did not start: {line!r}")
    return process, line.rsplit(" ", 1)[1].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4, help="solutions per problem")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--k", type=int, default=5, help="candidates per step")
    parser.add_argument("--steps", type=int, default=4, help="steps walked per problem")
    parser.add_argument("--step-max-tokens", type=int, default=128)
    parser.add_argument(
        "--head-start-s",
        type=float,
        default=10.0,
        help="seconds between the labeler's +1 on the candidate they then choose and the "
        "choice (rating the remaining candidates, deciding); 0 = nothing generated ahead",
    )
    parser.add_argument("--url", help="an OpenAI-compatible server instead of the local model")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stepwise.settings")

    from modeling.generator import LocalGenerator, OpenAICompatibleGenerator, Sampling

    texts = problems(args.problems)
    count_tokens = token_counter()
    pool_sampling = Sampling(max_tokens=args.max_tokens, seed=args.seed)
    step_sampling = Sampling(max_tokens=args.step_max_tokens, seed=args.seed)
    server = None
    if args.url:
        backends = {"server": OpenAICompatibleGenerator(base_url=args.url)}
    else:
        server, url = start_server()
        backends = {
            "in-process": LocalGenerator(),
            # serve_generator runs one generate at a time: more in flight would only queue
            # there and run into the client's timeout.
            "over HTTP": OpenAICompatibleGenerator(base_url=url, concurrency=1, timeout_s=600),
        }
    try:
        print(
            f"Pool: {len(texts)} MATH500 problems x {args.samples} samples, "
            f"max_tokens {args.max_tokens}"
        )
        rates = {}
        for name, generator in backends.items():
            generator.complete("warm up", n=1, sampling=Sampling(max_tokens=1))
            result = pool_throughput(generator, texts, args.samples, pool_sampling, count_tokens)
            rates[name] = result["tokens_per_s"]
            print(
                f"  {name:<11} {result['solutions']:>4} solutions ({result['complete']} with an "
                f"answer) in {result['seconds']:.1f} s: {result['solutions_per_min']:.1f} "
                f"solutions/min, {result['tokens_per_s']:.1f} tokens/s"
            )
        if len(rates) == 2:
            print(
                f"  over HTTP / in-process tokens/s: {rates['over HTTP'] / rates['in-process']:.2f}"
            )

        generator = next(iter(backends.values()))
        latencies = candidate_latencies(generator, texts, args.k, args.steps, step_sampling)
        waits = [max(0.0, latency - args.head_start_s) for latency in latencies]
        print(
            f"\nCandidates: k={args.k}, {len(latencies)} candidate sets along "
            f"{len(texts)} paths ({next(iter(backends))})"
        )
        print(
            f"  one candidate set (no head start):  p50 {percentile(latencies, 0.5):.2f} s, "
            f"p95 {percentile(latencies, 0.95):.2f} s, mean {statistics.mean(latencies):.2f} s"
        )
        print(
            f"  labeler's wait, {args.head_start_s:g} s head start:   p50 "
            f"{percentile(waits, 0.5):.2f} s, p95 {percentile(waits, 0.95):.2f} s, "
            f"{sum(w == 0 for w in waits)}/{len(waits)} sets ready in time"
        )
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=20)


if __name__ == "__main__":
    main()
