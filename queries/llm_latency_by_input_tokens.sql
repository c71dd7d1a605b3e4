-- Question: how does LLM latency grow with prompt size, per model (input-token buckets <50, 50-200, 200-500, >500)?
-- Tables: spans (stage = 'llm'). Also the time to first token and the share of calls that timed out.
WITH llm AS (
    SELECT
        model,
        input_tokens,
        duration_ms,
        ttft_ms,
        status,
        CASE
            WHEN input_tokens < 50  THEN '<50'
            WHEN input_tokens < 200 THEN '50-200'
            WHEN input_tokens < 500 THEN '200-500'
            ELSE '>500'
        END AS input_bucket
    FROM spans
    WHERE stage = 'llm' AND input_tokens IS NOT NULL
)
SELECT
    model,
    input_bucket,
    count(*)                                                          AS calls,
    approx_percentile_cont(0.5)  WITHIN GROUP (ORDER BY duration_ms)  AS p50_ms,
    approx_percentile_cont(0.9)  WITHIN GROUP (ORDER BY duration_ms)  AS p90_ms,
    approx_percentile_cont(0.99) WITHIN GROUP (ORDER BY duration_ms)  AS p99_ms,
    avg(ttft_ms)                                                      AS avg_ttft_ms,
    round(100.0 * sum(CASE WHEN status = 'timeout' THEN 1 ELSE 0 END) / count(*), 1) AS timeout_pct
FROM llm
GROUP BY model, input_bucket
ORDER BY model, min(input_tokens);
