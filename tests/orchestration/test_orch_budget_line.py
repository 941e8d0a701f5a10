"""The report's budget line shows the share of the budget used as the asset metadata does
(``budget_used_pct``, one decimal): a 3.5 % run read "(3 %)" in the report and 3.5 in the UI."""

from __future__ import annotations

from assets.cost_tables import BudgetStatus
from assets.report_render import budget_line


def test_budget_line_shows_the_metadata_share_to_one_decimal():
    b = BudgetStatus(period="run abc", spend_usd=1.3897, budget_usd=40.0)
    line = budget_line(b, enforced=True)
    assert "(3.5 %)" in line  # 1.3897 / 40 = 3.47 %, metadata budget_used_pct 3.5
    assert "(3 %)" not in line and "within budget" in line
