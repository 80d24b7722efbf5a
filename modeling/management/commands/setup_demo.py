from django.core.management.base import BaseCommand

from labeling.services.demo import demo_setup
from modeling.services.demo import DEMO_PART
from modeling.services.demo_suggest import SUGGEST_PART


class Command(BaseCommand):
    # Here, not in labeling: the demo spans both apps and only modeling may import labeling.
    help = (
        "Load the sample problems and solutions, the candidate pool and the evaluation set, a "
        "batch in suggest mode with its pre-labels, and "
        "create one demo account per role; "
        "says what the demo holds and what this run added (a re-run adds nothing)."
    )

    def handle(self, *args, **options):
        report = demo_setup([DEMO_PART, SUGGEST_PART])
        for line in report.steps:
            self.stdout.write(line)
        self.stdout.write(self.style.SUCCESS(f"\n{report.holds()}"))
        self.stdout.write(report.added())
        self.stdout.write(self.style.SUCCESS("\nDemo accounts (username / password: roles):"))
        for username, password, roles in report.accounts:
            self.stdout.write(f"  {username:<11} / {password:<16} {', '.join(roles)}")
