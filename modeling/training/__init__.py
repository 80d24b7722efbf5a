"""The PRM training core: plain PyTorch + transformers + peft, no Django (see pyproject's
import-linter contracts). Run by `python -m modeling.training.cli` and by Celery tasks."""
