"""The generator on this machine: pool throughput, and how long a labeler waits for candidates.

    python -m benchmarks.generation                    # local SmolLM2, in-process and over HTTP
    python -m benchmarks.generation --problems 8 --samples 8 --max-tokens 384
    python -m benchmarks.generation --skip-pool --problems 4 --steps 3   # part 2 only
    python -m benchmarks.generation --url http://gpu-host:8000/v1   # a vLLM server instead

Part 1, pool throughput: `sample_solutions` on MATH500 problems, N samples each: solutions per
minute and generated tokens per second, in-process and through `manage.py serve_generator`
(the OpenAI client path), with the ratio of the two (the cost of the HTTP path).

Part 2, the alternatives protocol: a simulated labeler walks a path, at each step asking for k
candidate next steps for the prefix it chose (the first candidate). At every prefix both paths
run, with the same seed: the old one (no streaming, the old token cap; in process, float32
weights and the prompt encoded once per sample: every candidate shows when the whole batch has
ended) and the new one (int8 linear layers, the prompt encoded once, each candidate stored, so
shown, as soon as its sample ends; the new cap). Reported: the time to the first candidate
visible and to all of them (the set complete: k, or fewer with the reason), p50 and p95,
old / new. The page polls once a second, so a labeler sees a candidate up to 1 s after it is
stored. The wait with generation ahead (the next step asked for at the labeler's +1,
--head-start-s before the choice) is the time to all k minus the head start.
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


def old_next_steps(generator, problem: str, prefix: list[str], k: int, sampling) -> list[str]:
    """`next_steps` as it was before streaming, for the comparison: one batch, then each
    answer heading's answer; the set is stored (and shown) when all of it is done."""
    from labeling.prm800k import answer_section
    from modeling.generator import STEP_SEPARATOR, step_prompt

    prompt = step_prompt(problem, prefix)
    steps: list[str] = []
    for sample in generator.complete(prompt, n=k, sampling=sampling, stop=(STEP_SEPARATOR,)):
        step = sample.text.strip()
        section = answer_section(step)
        if section is not None and not section.answer:
            answer = generator.complete(
                prompt + step + STEP_SEPARATOR, n=1, sampling=sampling, stop=(STEP_SEPARATOR,)
            )[0].text.strip()
            step = f"{step}{STEP_SEPARATOR}{answer}" if answer else ""
        if step and step not in steps:
            steps.append(step)
    return steps


def stopwatch(start: float, laps: list[float]):
    """An `on_step` that notes the seconds since `start` at each candidate found."""
    return lambda steps: laps.append(time.perf_counter() - start)


def candidate_timings(
    generator, texts: list[str], k: int, steps: int, old_sampling, new_sampling, old_generator=None
) -> dict[str, dict[str, list[float]]]:
    """Seconds to the first candidate visible and to the set complete, old and new path, at
    each prefix along simulated paths (the labeler takes the new path's first candidate)."""
    from labeling.prm800k import is_final_step
    from modeling.generator import next_steps

    timings: dict[str, dict[str, list[float]]] = {
        path: {"first": [], "all": [], "count": []} for path in ("old", "new")
    }
    for problem in texts:
        prefix: list[str] = []
        for _ in range(steps):
            # Old: the whole set at once, at the old cap.
            start = time.perf_counter()
            old = old_next_steps(old_generator or generator, problem, prefix, k, old_sampling)
            took = time.perf_counter() - start
            timings["old"]["first"].append(took)
            timings["old"]["all"].append(took)
            timings["old"]["count"].append(len(old))
            # New: each candidate as its sample ends (what fill_proposal stores for the page).
            shown: list[float] = []
            start = time.perf_counter()
            new = next_steps(
                generator,
                problem=problem,
                prefix=prefix,
                k=k,
                sampling=new_sampling,
                on_step=stopwatch(start, shown),
            )
            took = time.perf_counter() - start
            timings["new"]["first"].append(shown[0] if shown else took)
            timings["new"]["all"].append(took)
            timings["new"]["count"].append(len(new.steps))
            print(
                f"  step {len(prefix) + 1}: old all {timings['old']['all'][-1]:.1f} s; new first "
                f"{timings['new']['first'][-1]:.1f} s, all {took:.1f} s "
                f"({len(new.steps)} of {k}: {dict(new.dropped) or 'none dropped'})",
                flush=True,
            )
            if not new.steps or is_final_step(new.steps[0]):
                break
            prefix.append(new.steps[0])
    return timings


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
    parser.add_argument(
        "--step-max-tokens",
        type=int,
        default=None,
        help="the new path's token cap per candidate (default STEPWISE_GENERATOR_STEP_MAX_TOKENS)",
    )
    parser.add_argument(
        "--old-step-max-tokens", type=int, default=128, help="the old path's token cap"
    )
    parser.add_argument(
        "--skip-pool", action="store_true", help="part 2 only (no pool, no HTTP server)"
    )
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
    os.environ.setdefault("SECRET_KEY", "benchmark-only")

    from django.conf import settings

    from modeling.generator import LocalGenerator, OpenAICompatibleGenerator, Sampling

    step_max_tokens = args.step_max_tokens or settings.STEPWISE_GENERATOR_STEP_MAX_TOKENS
    texts = problems(args.problems)
    server = None
    if args.url:
        backends = {"server": OpenAICompatibleGenerator(base_url=args.url)}
    elif args.skip_pool:
        backends = {"in-process": LocalGenerator()}
    else:
        server, url = start_server()
        backends = {
            "in-process": LocalGenerator(),
            # serve_generator runs one generate at a time: more in flight would only queue
            # there and run into the client's timeout.
            "over HTTP": OpenAICompatibleGenerator(base_url=url, concurrency=1, timeout_s=600),
        }
    try:
        for generator in backends.values():
            generator.complete("warm up", n=1, sampling=Sampling(max_tokens=1))
        if not args.skip_pool:
            pool(backends, texts, args)

        generator = next(iter(backends.values()))
        # In process, the old path is the old generator: float32, the prompt copied per sample.
        old_generator = None
        if isinstance(generator, LocalGenerator):
            old_generator = LocalGenerator(int8=False, encode_prompt_once=False)
            old_generator.complete("warm up", n=1, sampling=Sampling(max_tokens=1))
        timings = candidate_timings(
            generator,
            texts,
            args.k,
            args.steps,
            Sampling(max_tokens=args.old_step_max_tokens, seed=args.seed),
            Sampling(max_tokens=step_max_tokens, seed=args.seed),
            old_generator,
        )
        sets = len(timings["new"]["all"])
        print(
            f"\nCandidates: k={args.k}, {sets} candidate sets along {len(texts)} paths "
            f"({next(iter(backends))}); old: no streaming, cap {args.old_step_max_tokens} "
            f"tokens; new: streamed, cap {step_max_tokens} tokens"
        )
        print(f"  {'':<26}{'old p50':>9}{'p95':>8}{'new p50':>10}{'p95':>8}{'old/new p50':>13}")
        for label, key in (("first candidate visible", "first"), ("all candidates", "all")):
            old, new = timings["old"][key], timings["new"][key]
            print(
                f"  {label:<26}{percentile(old, 0.5):>8.2f}s{percentile(old, 0.95):>7.2f}s"
                f"{percentile(new, 0.5):>9.2f}s{percentile(new, 0.95):>7.2f}s"
                f"{percentile(old, 0.5) / percentile(new, 0.5):>12.1f}x"
            )
        for path in ("old", "new"):
            counts = timings[path]["count"]
            waits = [max(0.0, t - args.head_start_s) for t in timings[path]["all"]]
            print(
                f"  {path}: {statistics.mean(counts):.1f} candidates a set on average; wait "
                f"with a {args.head_start_s:g} s head start p50 {percentile(waits, 0.5):.2f} s, "
                f"p95 {percentile(waits, 0.95):.2f} s"
            )
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=20)


def pool(backends: dict, texts: list[str], args: argparse.Namespace) -> None:
    from modeling.generator import Sampling

    count_tokens = token_counter()
    pool_sampling = Sampling(max_tokens=args.max_tokens, seed=args.seed)
    print(
        f"Pool: {len(texts)} MATH500 problems x {args.samples} samples, "
        f"max_tokens {args.max_tokens}"
    )
    rates = {}
    for name, generator in backends.items():
        result = pool_throughput(generator, texts, args.samples, pool_sampling, count_tokens)
        rates[name] = result["tokens_per_s"]
        print(
            f"  {name:<11} {result['solutions']:>4} solutions ({result['complete']} with an "
            f"answer) in {result['seconds']:.1f} s: {result['solutions_per_min']:.1f} "
            f"solutions/min, {result['tokens_per_s']:.1f} tokens/s"
        )
    if len(rates) == 2:
        print(f"  over HTTP / in-process tokens/s: {rates['over HTTP'] / rates['in-process']:.2f}")


if __name__ == "__main__":
    main()
