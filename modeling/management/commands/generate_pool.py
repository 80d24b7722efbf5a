"""Sample solutions from the generator into the active-learning pool."""

from django.core.management.base import BaseCommand, CommandError

from labeling.management.projects import add_project_argument, project_from_option
from modeling.models import SamplingRun
from modeling.services import sampling
from modeling.training.cli import positive_int


def id_list(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise ValueError(f"not a comma-separated list of ids: {text!r}") from exc


class Command(BaseCommand):
    help = (
        "Sample N solutions per problem from the generator (STEPWISE_GENERATOR_URL, or the local "
        "SmolLM2 when unset), split them into steps, grade the final answers against the ground "
        "truth and add them to the candidate pool. Runs here with progress lines (--queue sends "
        "it to the generate queue instead); --resume RUN goes on where a run stopped."
    )

    def add_arguments(self, parser):
        parser.add_argument("--samples", type=positive_int, default=16, help="Per problem.")
        parser.add_argument("--limit", type=positive_int, help="At most this many problems.")
        parser.add_argument("--problems", type=id_list, help="Problem ids, comma-separated.")
        parser.add_argument("--batch", type=int, help="The problems of this batch's solutions.")
        add_project_argument(parser, "Whose pool and problems: the project's")
        parser.add_argument("--subject", help="MATH subject, e.g. Algebra.")
        parser.add_argument("--level", type=int, help="MATH level 1-5.")
        parser.add_argument("--max-tokens", type=positive_int, help="Per solution.")
        parser.add_argument("--temperature", type=float)
        parser.add_argument("--top-p", type=float)
        parser.add_argument("--seed", type=int)
        parser.add_argument("--queue", action="store_true", help="Send to the generate queue.")
        parser.add_argument("--resume", type=int, metavar="RUN", help="Go on with this run.")

    def handle(self, *args, **options):
        project = project_from_option(options["project"])
        try:
            if options["resume"] is not None:
                run = SamplingRun.objects.filter(pk=options["resume"], project=project).first()
                if run is None:
                    raise CommandError(f"There is no sampling run {options['resume']}.")
                run = sampling.resume_sampling_run(run) if not options["queue"] else run
            else:
                run = sampling.create_sampling_run(
                    samples=options["samples"],
                    problem_ids=options["problems"],
                    batch_id=options["batch"],
                    subject=options["subject"],
                    level=options["level"],
                    limit=options["limit"],
                    max_tokens=options["max_tokens"],
                    temperature=options["temperature"],
                    top_p=options["top_p"],
                    seed=options["seed"],
                    send=options["queue"],
                    project_id=project.pk,
                )
        except sampling.SamplingError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"Sampling run {run.pk}: {run.samples} samples x {run.total} problems "
            f"({run.next_index} already done)"
        )
        if options["queue"]:
            self.stdout.write("Sent to the generate queue; follow it on /pool/sampling/.")
            return
        finished = sampling.execute_sampling_run(run.pk, progress=self._progress)
        if finished is None:
            raise CommandError(f"Sampling run {run.pk} is being run elsewhere.")
        self.stdout.write(self._summary(finished))
        if finished.status != SamplingRun.Status.SUCCEEDED:
            raise CommandError(
                f"Sampling run {run.pk} {finished.status}: {finished.error} "
                f"(go on with: manage.py generate_pool --resume {run.pk})"
            )

    def _progress(self, run: SamplingRun) -> None:
        self.stdout.write(f"  problem {run.next_index}/{run.total}: {run.added} added so far")

    @staticmethod
    def _summary(run: SamplingRun) -> str:
        return (
            f"{run.added} solutions added to the pool by {run.generator} "
            f"({run.graded_correct} graded correct, {run.graded_wrong} wrong); "
            f"{run.incomplete} samples had no final answer, {run.duplicates} were already there"
        )
