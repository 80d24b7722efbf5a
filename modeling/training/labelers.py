"""Simulated labelers over HTTP (load testing): they log in and rate through the real
endpoints, with ratings an oracle gives (`oracle.oracle_lookup`)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence


class HttpLabeler:
    """Logs in and labels through the real endpoints, as a browser would.

    Ratings come from `ratings_for(labeling_id)` (e.g. `modeling.selectors.oracle_ratings(...)`, which looks the
    claimed solution up in an oracle). CSRF: the `csrftoken` cookie sent back as X-CSRFToken.
    """

    def __init__(self, base_url: str, username: str, password: str) -> None:
        import requests  # only the load-testing client needs it

        self.base = base_url.rstrip("/")
        self.session = requests.Session()
        self.username, self.password = username, password
        self.timings: list[float] = []

    def _csrf(self) -> dict[str, str]:
        return {"X-CSRFToken": self.session.cookies.get("csrftoken") or ""}

    def login(self) -> None:
        self.session.get(f"{self.base}/accounts/login/")
        response = self.session.post(
            f"{self.base}/accounts/login/",
            data={"username": self.username, "password": self.password},
            headers={**self._csrf(), "Referer": f"{self.base}/accounts/login/"},
        )
        response.raise_for_status()
        if "/accounts/login/" in response.url:
            raise RuntimeError(f"login failed for {self.username}")

    def claim(self) -> int | None:
        """POST /label/next/ -> the labeling id it redirects to, or None when nothing waits."""
        response = self.session.post(
            f"{self.base}/label/next/",
            headers={**self._csrf(), "Referer": self.base},
            allow_redirects=False,
        )
        location = response.headers.get("Location", "")
        parts = [p for p in location.split("/") if p]
        if response.status_code in (301, 302, 303) and len(parts) >= 2 and parts[-1].isdigit():
            return int(parts[-1])
        return None

    def rate(self, labeling_id: int, step_index: int, rating: int, elapsed_ms: int = 1500) -> int:
        started = time.perf_counter()
        response = self.session.post(
            f"{self.base}/label/{labeling_id}/rate/",
            data={"step_index": step_index, "rating": rating, "elapsed_ms": elapsed_ms},
            headers={
                **self._csrf(),
                "HX-Request": "true",
                "Referer": f"{self.base}/label/{labeling_id}/",
            },
        )
        self.timings.append(time.perf_counter() - started)
        return response.status_code

    def label(
        self,
        ratings_for: Callable[[int], Sequence[int]],
        *,
        max_solutions: int = 1,
        rng: random.Random | None = None,
    ) -> list[int]:
        """Claim and rate up to max_solutions solutions; stops rating a solution at its first -1
        (the page then finishes it as "found an error"). Returns the labeling ids."""
        done = []
        for _ in range(max_solutions):
            labeling_id = self.claim()
            if labeling_id is None:
                break
            for index, rating in enumerate(ratings_for(labeling_id)):
                status = self.rate(
                    labeling_id, index, rating, elapsed_ms=(rng or random).randint(800, 4000)
                )
                if status >= 400:
                    raise RuntimeError(
                        f"rating step {index} of labeling {labeling_id}: HTTP {status}"
                    )
                if rating == -1:
                    break
            done.append(labeling_id)
        return done
