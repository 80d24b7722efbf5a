"""Importers: MATH problems, PRM800K label lines, generator samples.

Each reads its JSONL file line by line and writes in chunks with bulk inserts (COPY on
PostgreSQL), so memory stays flat on the full PRM800K release. PRM800K lines are decoded,
validated and checked byte for byte in worker processes (`labeling.parsing`) while this
process writes the chunks before them. A bad line raises LineError naming file, line and
field; by default the whole file is one transaction, so nothing of it is written. With
`skip_invalid` bad lines are reported and the rest is written, chunk by chunk. Re-importing
a file adds nothing twice (problems by text hash or unique_id, solutions by content hash,
labelings by the line's hash).

  runner       a file read, parsed (in worker processes) and written in chunks; the report
               and its errors
  problems     MATH problems
  label_lines  PRM800K label lines, written through bulk_copy (COPY on PostgreSQL) or the ORM
  bulk_copy    rows in bulk: COPY with ids taken from the sequence first, bulk_create elsewhere
  solutions    generator samples into a batch, and the app's own solutions into the pool
  uploads      uploaded files: a size limit, every bad line reported, all or nothing

The names callers use are re-exported here: `importing.import_prm800k(...)`.
"""

from labeling.parsing import solution_content_hash
from labeling.services.importing.label_lines import import_prm800k
from labeling.services.importing.problems import MathProblem, import_math, parse_math_problem
from labeling.services.importing.runner import (
    ANALYZE_AFTER_LINES,
    ImportReport,
    LineError,
    NoRecords,
    problem_hash,
    refresh_planner_statistics,
    require_records,
    solution_bounds,
)
from labeling.services.importing.solutions import (
    AfterCreate,
    PrepareSolution,
    SampleLine,
    import_samples,
    import_solutions,
    parse_sample_line,
    write_solutions,
)
from labeling.services.importing.uploads import (
    UploadRejected,
    import_uploaded,
    prm800k_upload,
    samples_upload,
)

__all__ = [
    "ANALYZE_AFTER_LINES",
    "AfterCreate",
    "ImportReport",
    "LineError",
    "MathProblem",
    "NoRecords",
    "PrepareSolution",
    "SampleLine",
    "UploadRejected",
    "import_math",
    "import_prm800k",
    "import_samples",
    "import_solutions",
    "import_uploaded",
    "parse_math_problem",
    "parse_sample_line",
    "prm800k_upload",
    "problem_hash",
    "refresh_planner_statistics",
    "require_records",
    "samples_upload",
    "solution_bounds",
    "solution_content_hash",
    "write_solutions",
]
