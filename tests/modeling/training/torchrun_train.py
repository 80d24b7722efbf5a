"""Run under torchrun by test_distributed.py: train() on every rank, stopping (with a
checkpoint) once rank 0 has reported a given step, the way a cancel or a lost rank would.

    torchrun --nproc-per-node 2 torchrun_train.py CONFIG_JSON PRM800K_JSONL STOP_AFTER_STEP
"""

from __future__ import annotations

import json
import sys

from modeling.training.config import TrainConfig
from modeling.training.data import examples_from_prm800k, read_jsonl
from modeling.training.distributed import process_group
from modeling.training.train import train


def main() -> None:
    config = TrainConfig.from_dict(json.loads(sys.argv[1]))
    examples = examples_from_prm800k(read_jsonl(sys.argv[2]))
    stop_after = int(sys.argv[3])
    seen = [0]
    with process_group(config.device):
        train(
            config,
            examples,
            progress=lambda p: seen.__setitem__(0, p.step if p.phase == "train" else 0),
            should_stop=lambda: seen[0] >= stop_after,
        )


if __name__ == "__main__":
    main()
