-- Question: which stages and components are slowest (span duration p50/p99), and how often do they time out?
-- Tables: spans. Components are the tool, the model or else the span name.
SELECT
    stage,
    coalesce(tool, model, name)                                     AS component,
    count(*)                                                        AS spans,
    approx_percentile_cont(0.5)  WITHIN GROUP (ORDER BY duration_ms) AS p50_ms,
    approx_percentile_cont(0.99) WITHIN GROUP (ORDER BY duration_ms) AS p99_ms,
    max(duration_ms)                                                AS max_ms,
    sum(CASE WHEN status = 'timeout' THEN 1 ELSE 0 END)             AS timeouts
FROM spans
GROUP BY stage, coalesce(tool, model, name)
ORDER BY p99_ms DESC, spans DESC
LIMIT 50;
