-- Question: which inputs are being rejected, why, and since when (docs/inputs.md#bad-input)?
-- Tables: rejected (ingested_at is when the store accepted the row). An example raw line per reason.
SELECT
    source,
    reason,
    count(*)          AS records,
    min(ingested_at)  AS first_seen,
    max(ingested_at)  AS last_seen,
    min(position)     AS example_position,
    first_value(raw ORDER BY line) AS example_raw
FROM rejected
GROUP BY source, reason
ORDER BY records DESC, source, reason;
