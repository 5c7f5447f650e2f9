"""One check's result, where a source's week keeps them, and what the per-source checks share: how much history
they need, the coverage threshold, and the wording of their figures."""
from __future__ import annotations

from dataclasses import dataclass, field

HISTORY_WEEKS = 4
MIN_HISTORY = 2
COVERAGE_DROP = 0.20                           # more than 20 percentage points


@dataclass(frozen=True)
class CheckOutcome:
    name: str            # "non_empty" | "volume" | "coverage" | "schema" | "structure"
    passed: bool
    severity: str        # "ERROR" | "WARN"
    message: str
    metadata: dict = field(default_factory=dict)  # numeric figures only (plottable in Dagster)
    # why the check's usual judgement was not made this week (and what judged instead), "" when it was: `fleet
    # status` and the UI list it, so a check that could not look is never mistaken for one that looked and passed
    skipped: str = ""


def checks_key(source: str) -> str:
    """Where the raw step stores the source's check results for the week (read by alerts and the quality gate)."""
    return f"raw/{source}.checks.json"


def fmt_num(x: float) -> str:
    return f"{int(x)}" if float(x).is_integer() else f"{x:.1f}"


def pct(share: float) -> str:
    return f"{share * 100:.0f}%"


def weeks_text(n: int) -> str:
    return f"{n} week" if n == 1 else f"{n} weeks"


def short_history(n: int) -> str:
    return f"{weeks_text(n)} of history, needs {MIN_HISTORY}"
