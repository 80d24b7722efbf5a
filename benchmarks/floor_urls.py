"""benchmarks/floor.py's URLconf: the project's URLs plus POST /bench/floor/, the least a
rating could cost on our stack: the same middleware, session auth (login_required) and CSRF
check as the rating view, then exactly one INSERT into a table of the benchmark's own
(created by benchmarks/floor.py, not a Django model) and a tiny fragment. Benchmark code
only: served under benchmarks/floor_settings.py, never by the app."""

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.http import require_POST

from stepwise import urls as project

TABLE = "bench_floor_rating"  # benchmarks/floor.py creates it (the same name there)


@login_required
@require_POST
def floor(request: HttpRequest) -> HttpResponse:
    with connection.cursor() as cursor:
        cursor.execute(
            f"insert into {TABLE} (user_id, step_index, rating, elapsed_ms) values (%s, %s, %s, %s)",
            [
                request.user.pk,
                int(request.POST["step_index"]),
                int(request.POST["rating"]),
                int(request.POST.get("elapsed_ms") or 0),
            ],
        )
    return HttpResponse('<div id="floor">saved</div>')


urlpatterns = [path("bench/floor/", floor), *project.urlpatterns]
handler403 = project.handler403
handler404 = project.handler404
handler500 = project.handler500
