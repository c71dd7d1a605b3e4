-- Question: how much of the request's time budget is left when each stage starts (remaining_budget_ms), and how often is it already gone?
-- Tables: spans. Low p10 values show the stage that runs out of budget first.
SELECT
    stage,
    count(*)                                                                     AS spans,
    approx_percentile_cont(0.1) WITHIN GROUP (ORDER BY remaining_budget_ms)     AS p10_left_ms,
    approx_percentile_cont(0.5) WITHIN GROUP (ORDER BY remaining_budget_ms)     AS p50_left_ms,
    min(remaining_budget_ms)                                                     AS min_left_ms,
    sum(CASE WHEN remaining_budget_ms <= 0 THEN 1 ELSE 0 END)                    AS started_over_budget,
    sum(CASE WHEN timeout_ms IS NOT NULL AND timeout_ms > remaining_budget_ms THEN 1 ELSE 0 END) AS timeout_beyond_budget
FROM spans
WHERE remaining_budget_ms IS NOT NULL
GROUP BY stage
ORDER BY p50_left_ms ASC;
