"""Column names every stage and the runner agree on."""

import pyarrow as pa

ID = "id"
TEXT = "text"
SOURCE = "source"

# Bookkeeping columns: a dropped row is marked, never deleted (STYLE.md, convention 5).
DROP_REASON = "drop_reason"
DROP_STAGE = "drop_stage"
DUPLICATE_OF = "duplicate_of"
# Lineage: a row made by a creating stage names the row it came from (transforms/core/creating.py).
PARENT_ID = "parent_id"
# Provenance of rows an LLM made or rewrote (prompt id@version, model, sampling params, seed).
PROMPT = "_prompt"
MODEL = "_model"
GEN_PARAMS = "_gen_params"
# Written by the runner only, to split a stage's output into kept and rejected files.
STATUS = "_status"
KEPT = "kept"
REJECTED = "rejected"

BOOKKEEPING = (DROP_REASON, DROP_STAGE, STATUS)

# The common crawl schema every reader maps its input to.
CRAWL_SCHEMA = pa.schema(
    [
        pa.field(ID, pa.string(), nullable=False),
        pa.field(TEXT, pa.string()),
        pa.field(SOURCE, pa.string()),
        pa.field("url", pa.string()),
        pa.field("title", pa.string()),
        pa.field("body", pa.string()),
    ]
)
