from django.apps import AppConfig


class ModelingConfig(AppConfig):
    name = "modeling"
    verbose_name = "Modeling"

    def ready(self) -> None:
        # The lead's item browser filters on "the model disagrees" (labeling.extensions).
        # Imported here: models are not ready when app configs load.
        from labeling import extensions
        from modeling.selectors import disagreeing_solution_ids

        extensions.provide_model_disagreement(disagreeing_solution_ids)
