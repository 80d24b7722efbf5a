"""TRL's PRMTrainer on the data and model `benchmarks/train.py` prepared.

Runs inside the benchmark-only TRL virtualenv (it imports nothing from Stepwise) and
prints one JSON line: tokens, labelled steps, seconds.

    python _train_trl.py --model-dir DIR --data rows.jsonl --batch-size 4 --max-length 1024
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch
from datasets import Dataset
from transformers import AutoModelForTokenClassification, AutoTokenizer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--data", required=True, help="JSONL of {prompt, completions, labels}")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=1e-4)
    args = parser.parse_args()

    import trl
    from trl.experimental.prm import PRMConfig, PRMTrainer

    with open(args.data) as f:
        rows = [json.loads(line) for line in f]
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForTokenClassification.from_pretrained(args.model_dir, num_labels=3)
    cuda = torch.cuda.is_available()
    with tempfile.TemporaryDirectory() as out:
        config = PRMConfig(
            output_dir=out,
            per_device_train_batch_size=args.batch_size,
            num_train_epochs=1,
            learning_rate=args.lr,
            max_length=args.max_length,
            step_separator="\n\n",
            save_strategy="no",
            report_to=[],
            logging_steps=10_000,
            bf16=cuda,
            use_cpu=not cuda,
            seed=0,
        )
        trainer = PRMTrainer(
            model=model,
            args=config,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
        )
        data = trainer.train_dataset
        tokens = sum(len(ids) for ids in data["input_ids"])
        labels = sum(sum(label != -100 for label in row) for row in data["labels"])
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "trl": trl.__version__,
                "sequences": len(rows),
                "tokens": tokens,
                "labels": labels,
                "seconds": seconds,
            }
        )
    )


if __name__ == "__main__":
    main()
