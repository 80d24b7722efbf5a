from django.http import HttpRequest

from labeling.roles import user_roles


def roles(request: HttpRequest) -> dict[str, set[str]]:
    return {"roles": user_roles(request.user)}
