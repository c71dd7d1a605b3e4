-- Question: which root causes produced the 504s, and what share of all 504s does each explain?
-- Tables: verdicts (registered by the server). One row per (kind, component), most 504s first.
SELECT
    kind,
    component,
    count(*)                                                   AS traces,
    round(100.0 * count(*) / sum(count(*)) OVER (), 1)         AS pct_of_504s,
    round(avg(share), 2)                                       AS avg_critical_share,
    approx_percentile_cont(0.5) WITHIN GROUP (ORDER BY elapsed_ms) AS p50_elapsed_ms
FROM verdicts
WHERE outcome = 'gateway_timeout'
GROUP BY kind, component
ORDER BY traces DESC, kind, component;
