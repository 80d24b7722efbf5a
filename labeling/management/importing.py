"""Shared plumbing for the import commands: report, and turn a bad line into a clear error."""

from collections.abc import Callable

from django.core.management.base import BaseCommand, CommandError

from labeling.services.importing import ImportReport, LineError, NoRecords


def run_import(
    command: BaseCommand, paths: list[str], do_import: Callable[[str], ImportReport]
) -> None:
    for path in paths:
        try:
            report = do_import(path)
        except FileNotFoundError:
            raise CommandError(f"{path}: no such file") from None
        except LineError as error:
            raise CommandError(f"{error} (nothing from {path} was written)") from None
        except NoRecords as error:
            raise CommandError(str(error)) from None
        command.stdout.write(command.style.SUCCESS(report.summary()))
        for error in report.errors[:50]:
            command.stderr.write(f"  skipped {error}")
        if len(report.errors) > 50:
            command.stderr.write(f"  ... and {len(report.errors) - 50} more invalid lines")
