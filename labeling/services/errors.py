"""Errors a labeling service raises; views and the API show the message."""

from __future__ import annotations


class LabelingError(Exception):
    """A request the labeling cannot accept; the message is shown to the labeler."""

    status_code = 400


class Conflict(LabelingError):
    """The request disagrees with the saved state (stale page, double submit of an old step)."""

    status_code = 409


class Forbidden(LabelingError):
    """The user may not do this now (a paused labeler's rating)."""

    status_code = 403


class NotFound(LabelingError):
    """The row is not there for this user (another labeler's labeling): the same 404 as a
    missing one, so ids say nothing about others' work."""

    status_code = 404
