"""TRL's PRMTrainer on the data and model a benchmark prepared (benchmarks/_trl.py runs it).

Runs inside the benchmark-only TRL virtualenv (it imports nothing from Stepwise) and
prints one JSON line: tokens, labelled steps, seconds. TRL's own code runs as released;
only its inputs (config, optional LoRA config) are set here.

    python _train_trl.py --model-dir DIR --data rows.jsonl --batch-size 4 --max-length 1024
    python _train_trl.py ... --max-steps 40 --lora-r 16 --save OUT   # a model to score
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time

import torch
from datasets import Dataset
from transformers import AutoModelForTokenClassification, AutoTokenizer

# Our 3-class layout (rating -1/0/+1 at class 0/1/2): an imported model reads it back.
ID2LABEL = {0: "-1", 1: "0", 2: "+1"}
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--data", required=True, help="JSONL of {prompt, completions, labels}")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--max-steps", type=int, default=-1, help="-1: one epoch")
    parser.add_argument("--warmup-ratio", type=float, default=0.0)
    parser.add_argument("--scheduler", default="linear", help="lr_scheduler_type")
    parser.add_argument("--lora-r", type=int, default=0, help="0: full fine-tuning")
    parser.add_argument("--lora-alpha", type=int, default=32)
    parser.add_argument("--lora-dropout", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", help="write the trained model here (LoRA merged)")
    args = parser.parse_args()

    import trl
    from trl.experimental.prm import PRMConfig, PRMTrainer

    with open(args.data) as f:
        rows = [json.loads(line) for line in f]
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForTokenClassification.from_pretrained(
        args.model_dir,
        num_labels=3,
        id2label=ID2LABEL,
        label2id={v: k for k, v in ID2LABEL.items()},
    )
    if model.config.pad_token_id is None:  # the token-classification forward pads with it
        model.config.pad_token_id = tokenizer.pad_token_id or tokenizer.eos_token_id
    peft_config = None
    if args.lora_r:
        from peft import LoraConfig

        peft_config = LoraConfig(
            task_type="TOKEN_CLS",
            r=args.lora_r,
            lora_alpha=args.lora_alpha,
            lora_dropout=args.lora_dropout,
            target_modules=LORA_TARGETS,
        )
    cuda = torch.cuda.is_available()
    per_epoch = math.ceil(len(rows) / args.batch_size)  # optimizer steps in one epoch
    steps = args.max_steps if args.max_steps > 0 else per_epoch
    with tempfile.TemporaryDirectory() as out:
        config = PRMConfig(
            output_dir=out,
            per_device_train_batch_size=args.batch_size,
            num_train_epochs=1,
            max_steps=args.max_steps,
            learning_rate=args.lr,
            lr_scheduler_type=args.scheduler,
            warmup_steps=math.ceil(args.warmup_ratio * steps),
            max_length=args.max_length,
            step_separator="\n\n",
            save_strategy="no",
            report_to=[],
            logging_steps=10_000,
            bf16=cuda,
            use_cpu=not cuda,
            seed=args.seed,
        )
        trainer = PRMTrainer(
            model=model,
            args=config,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            peft_config=peft_config,
        )
        data = trainer.train_dataset
        tokens = sum(len(ids) for ids in data["input_ids"])
        labels = sum(sum(label != -100 for label in row) for row in data["labels"])
        started = time.perf_counter()
        result = trainer.train()
        seconds = time.perf_counter() - started
    # Tokens and labels the steps ran: more (or fewer) than one epoch when max_steps says so.
    epochs = result.global_step / per_epoch
    if args.save:
        trained = trainer.model
        if peft_config is not None:
            trained = trained.merge_and_unload()
        trained.save_pretrained(args.save)
        tokenizer.save_pretrained(args.save)
    print(
        json.dumps(
            {
                "trl": trl.__version__,
                "sequences": len(rows),
                "steps": result.global_step,
                "tokens": round(tokens * epochs),
                "labels": round(labels * epochs),
                "seconds": seconds,
                "final_loss": result.training_loss,
            }
        )
    )


if __name__ == "__main__":
    main()
