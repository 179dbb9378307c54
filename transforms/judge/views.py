"""Views of a row's text moved to transforms/text/views.py (below the LLM layer, which reads them too);
this module keeps the old import path."""

from transforms.text.views import (  # noqa: F401
    llm_views,
    min_over_parts,
    min_over_views,
    normalise,
    part_views,
    prefix_views,
    whole_parts,
    with_prefixes,
)
