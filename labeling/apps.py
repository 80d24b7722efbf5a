from django.apps import AppConfig


class LabelingConfig(AppConfig):
    name = "labeling"
    verbose_name = "Labeling"

    def ready(self) -> None:
        from django.contrib.auth.models import Group, User
        from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save

        from labeling.access import forget_access
        from labeling.models import Batch, Membership, Project
        from labeling.services.tokens import (
            note_password_change,
            revoke_tokens_after_password_change,
        )

        # A new password revokes the user's API tokens however it was set (admin, a command).
        pre_save.connect(note_password_change, sender=User, dispatch_uid="password-noted")
        post_save.connect(
            revoke_tokens_after_password_change, sender=User, dispatch_uid="password-tokens"
        )

        # What a claim reads from the cache (roles, projects, batches) is forgotten when it
        # changes.
        for model in (Group, Batch, Membership, Project):
            post_save.connect(forget_access, sender=model, dispatch_uid=f"access-{model.__name__}")
            post_delete.connect(
                forget_access, sender=model, dispatch_uid=f"access-del-{model.__name__}"
            )
        m2m_changed.connect(forget_access, sender=User.groups.through, dispatch_uid="access-groups")
        m2m_changed.connect(
            forget_access, sender=Batch.labelers.through, dispatch_uid="access-batch-labelers"
        )
