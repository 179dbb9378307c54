"""What a review speaks: the verdicts an annotator gives, the fields an edit may change, and its error."""

from __future__ import annotations

VERDICTS: dict[str, str] = {
    "sol1": "Solution 1 is correct",
    "sol2": "Solution 2 is correct",
    "both_wrong": "Both solutions are wrong",
    "not_physical": "Not a physical commonsense question",
    "unsafe": "Unsafe or harmful",
    "needs_edit": "Needs an edit (write it in the boxes)",
}

EDIT_FIELDS = ("goal", "sol1", "sol2")


class ReviewError(ValueError):
    """A batch cannot be exported or imported as asked."""
