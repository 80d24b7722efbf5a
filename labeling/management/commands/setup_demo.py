from django.core.management.base import BaseCommand

from labeling.services.demo import create_demo_accounts, load_sample_data


class Command(BaseCommand):
    help = "Load the sample problems and solutions and create one demo account per role."

    def handle(self, *args, **options):
        for line in load_sample_data():
            self.stdout.write(line)
        self.stdout.write(self.style.SUCCESS("\nDemo accounts (username / password: roles):"))
        for username, password, roles in create_demo_accounts():
            self.stdout.write(f"  {username:<11} / {password:<16} {', '.join(roles)}")
