"""Reading a training checkpoint back in the test process, to compare two runs' weights."""

import tempfile
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save


def read_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint's trained parameters and optimizer state as plain tensors (training
    itself resumes through train.restore_checkpoint)."""
    with tempfile.TemporaryDirectory() as tmp:
        dcp_to_torch_save(path / "dcp", Path(tmp) / "state.pt")
        return torch.load(Path(tmp) / "state.pt", weights_only=False)
