"""What the judges cost on this machine: prm's steps judged per second, mc's cost per solution.

    python -m benchmarks.prelabel                      # SmolLM2 as the PRM backbone, CPU
    python -m benchmarks.prelabel --solutions 4 --mc-solutions 2 --max-steps 3 --max-tokens 64
    python -m benchmarks.prelabel --backbone PATH      # another backbone (a tiny one is faster)

Part 1, prm: `PRMJudge.judge` over PRM800K sample solutions (../shared/data/prm800k), steps
judged per second on the CPU, and on the GPU when one is available. The head is untrained (the
speed is the backbone's forward pass and the labelling; the labels mean nothing).

Part 2, mc: `MCJudge` with the local SmolLM2 at k = 4, 8 and 16 on the first solutions of the
samples: completions made, tokens generated (SmolLM2's tokenizer), seconds per solution, each
against `estimate_mc`, the estimate the product shows before a run starts (an upper bound:
rollouts stop at a solution's first -1 and a completion may stop before max_tokens). The
ratios printed are measured / estimate.
"""

from __future__ import annotations

import argparse
import time

from benchmarks._setup import shared_data


def sample_items(count: int):
    from modeling.judges import JudgeItem
    from modeling.training.data import example_from_prm800k, read_jsonl

    items = []
    for record in read_jsonl(shared_data() / "prm800k" / "samples.jsonl"):
        example = example_from_prm800k(record)  # the chosen path, as a labeler rated it
        if example is not None and example.steps:
            truth = record["question"].get("ground_truth_answer")
            items.append(JudgeItem(example.problem, list(example.steps), truth))
        if len(items) == count:
            break
    return items


def prm_speed(backbone: str, items, device: str) -> dict:
    import torch

    from modeling.judges import PRMJudge, Thresholds
    from modeling.training.config import TrainConfig
    from modeling.training.model import ProcessRewardModel

    torch.manual_seed(0)
    model = ProcessRewardModel.from_config(TrainConfig(backbone=backbone), torch.device(device))
    model.to(device)
    judge = PRMJudge(model, Thresholds(), name="prm: benchmark")
    judge.judge(items[:1])  # warm-up: first-call allocations
    started = time.perf_counter()
    judgements = judge.judge(items)
    seconds = time.perf_counter() - started
    steps = sum(len(j.labels) for j in judgements)
    return {"device": device, "solutions": len(items), "steps": steps, "seconds": seconds}


class CountingGenerator:
    """The local generator, counting the completions and tokens it returns."""

    def __init__(self, generator, count_tokens) -> None:
        self.generator = generator
        self.count_tokens = count_tokens
        self.name = generator.name
        self.concurrency = generator.concurrency
        self.completions = 0
        self.tokens = 0

    def complete(self, prompt, **kwargs):
        texts = self.generator.complete(prompt, **kwargs)
        self.completions += len(texts)
        self.tokens += sum(self.count_tokens(t.text) for t in texts)
        return texts


def mc_cost(items, k: int, max_steps: int, max_tokens: int, generator, count_tokens) -> dict:
    from modeling.generator import Sampling
    from modeling.judges import MCJudge, estimate_mc

    counting = CountingGenerator(generator, count_tokens)
    judge = MCJudge(counting, k=k, max_steps=max_steps, sampling=Sampling(max_tokens, seed=0))
    started = time.perf_counter()
    judge.judge(items)
    seconds = time.perf_counter() - started
    estimate = estimate_mc(items, k, max_steps, max_tokens=max_tokens)
    return {
        "k": k,
        "completions": counting.completions,
        "tokens": counting.tokens,
        "seconds_per_solution": seconds / len(items),
        "estimate": estimate,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", help="PRM backbone folder (default: the local SmolLM2).")
    parser.add_argument("--solutions", type=int, default=8, help="prm: solutions judged.")
    parser.add_argument("--mc-solutions", type=int, default=2, help="mc: solutions judged.")
    parser.add_argument("--max-steps", type=int, default=3, help="mc: steps per solution.")
    parser.add_argument("--max-tokens", type=int, default=64, help="mc: per completion.")
    parser.add_argument("--ks", default="4,8,16", help="mc: the k values, comma-separated.")
    parser.add_argument("--skip-prm", action="store_true")
    parser.add_argument("--skip-mc", action="store_true")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from modeling.training.backbones import smollm2_folder

    backbone = args.backbone or str(smollm2_folder())
    if not args.skip_prm:
        import torch

        items = sample_items(args.solutions)
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
        print(f"prm judge, backbone {backbone}:")
        for device in devices:
            row = prm_speed(backbone, items, device)
            print(
                f"  {row['device']}: {row['steps']} steps of {row['solutions']} solutions in "
                f"{row['seconds']:.2f} s = {row['steps'] / row['seconds']:.1f} steps/s"
            )
    if not args.skip_mc:
        from modeling.generator import LocalGenerator

        tokenizer = AutoTokenizer.from_pretrained(smollm2_folder(), local_files_only=True)

        def count_tokens(text: str) -> int:
            return len(tokenizer(text, add_special_tokens=False)["input_ids"])

        generator = LocalGenerator()
        items = sample_items(args.mc_solutions)
        print(
            f"mc judge, {generator.name}, {len(items)} solutions, max_steps {args.max_steps}, "
            f"max_tokens {args.max_tokens} (measured / estimate):"
        )
        for k in (int(part) for part in args.ks.split(",")):
            row = mc_cost(items, k, args.max_steps, args.max_tokens, generator, count_tokens)
            estimate = row["estimate"]
            print(
                f"  k={k:>2}: {row['completions']} / {estimate['completions']} completions "
                f"({row['completions'] / estimate['completions']:.2f}), {row['tokens']} / "
                f"{estimate['tokens']} tokens ({row['tokens'] / estimate['tokens']:.2f}), "
                f"{row['seconds_per_solution']:.1f} s per solution"
            )


if __name__ == "__main__":
    main()
