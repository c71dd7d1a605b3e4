-- Question: which gateway layer returns the 504s, and after how long (request_time p50/p99 shows each layer's read timeout)?
-- Tables: gateway_requests. One row per source (layer), outermost first.
SELECT
    source,
    layer,
    count(*)                                                                  AS requests,
    sum(CASE WHEN status = 504 THEN 1 ELSE 0 END)                             AS gateway_timeouts,
    round(100.0 * sum(CASE WHEN status = 504 THEN 1 ELSE 0 END) / count(*), 2) AS pct_504,
    approx_percentile_cont(0.5)  WITHIN GROUP (ORDER BY CASE WHEN status = 504 THEN request_time_ms END) AS p50_504_request_ms,
    approx_percentile_cont(0.99) WITHIN GROUP (ORDER BY CASE WHEN status = 504 THEN request_time_ms END) AS p99_504_request_ms,
    approx_percentile_cont(0.99) WITHIN GROUP (ORDER BY request_time_ms)      AS p99_all_request_ms
FROM gateway_requests
GROUP BY source, layer
ORDER BY layer, source;
