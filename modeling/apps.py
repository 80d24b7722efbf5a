from django.apps import AppConfig


class ModelingConfig(AppConfig):
    name = "modeling"
    verbose_name = "Modeling"

    # setup_demo's hooks (labeling.services.demo.demo_parts): the demo's candidate pool and
    # its evaluation set. Imported here, not at the top: models are not ready when app configs load.
    def demo_setup(self) -> list[str]:
        from modeling.services.demo import demo_evaluation_set, load_demo_pool

        return load_demo_pool() + demo_evaluation_set()

    def demo_counts(self) -> dict[str, int]:
        from modeling.services.demo import demo_pool_counts

        return demo_pool_counts()

    # The labeling page's candidate next steps (labeling.services.alternatives finds this hook:
    # labeling never imports modeling). Returns (generator name, up to k steps).
    def propose_next_steps(
        self, *, problem: str, prefix: list[str], k: int
    ) -> tuple[str, list[str]]:
        from modeling.services.sampling import propose_next_steps

        return propose_next_steps(problem=problem, prefix=prefix, k=k)

    # The lead's item browser filters on "the model disagrees" through this hook
    # (labeling.selectors.model_disagreement_ids: labeling never imports modeling).
    def solutions_disagreeing_with_model(self, *, batch, at_least: float) -> list[int] | None:
        from modeling.selectors import disagreeing_solution_ids

        return disagreeing_solution_ids(batch, at_least=at_least)
