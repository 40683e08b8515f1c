-- ab_verdicts: one row per (A/B session, judged figure): session.json's last judgement
-- (ab_sessions.verdicts, unnested), in the shape of `collobench ab --format json`. Loaded by
-- analysis.ab.warehouse_tables.load_session.
--   pipeline, metric     the figure 'pipeline/metric' split at its last '/';
--   phase                'solo' when the session's segments (and figures) name one pipeline,
--                        else 'collocated' (the segments run every pipeline of the spec);
--   change_pct           exp(Hodges-Lehmann of the per-block log differences) - 1, in %,
--                        with its 95% signed-rank interval change_ci95_low/high (NULL: an end
--                        too few blocks bound; session.json stores non-finite numbers as null);
--   mde_pct              the change the session could see at 90% power (NULL: not decidable);
--   blocks               the block differences the verdict rests on (kept blocks);
--   blocks_dropped       blocks left out of the judgement (session.json dropped_blocks);
--   p_value, p_holm      the signed-rank p-value and its Holm adjustment across figures;
--   status               how the session ended (decided, all_looks, budget_spent, ...).
CREATE OR REPLACE VIEW ab_verdicts AS
WITH judged AS (
    SELECT
        s.session_id,
        unnest(CAST(s.verdicts AS JSON[])) AS v
    FROM ab_sessions AS s
),
named AS (
    SELECT
        session_id,
        v ->> 'figure' AS figure,
        v
    FROM judged
),
figure_names AS (
    SELECT session_id, figure FROM named
    UNION
    SELECT session_id, unnest(json_keys(b."values")) AS figure
    FROM ab_blocks AS b
),
phases AS (
    SELECT
        session_id,
        CASE
            WHEN count(DISTINCT regexp_extract(figure, '^(.*)/[^/]*$', 1)) = 1 THEN 'solo'
            ELSE 'collocated'
        END AS phase
    FROM figure_names
    GROUP BY session_id
)
SELECT
    n.session_id,
    regexp_extract(n.figure, '^(.*)/[^/]*$', 1) AS pipeline,
    p.phase,
    regexp_extract(n.figure, '[^/]*$') AS metric,
    CAST(n.v ->> 'change_pct' AS DOUBLE) AS change_pct,
    CAST(n.v -> 'change_ci95' ->> 0 AS DOUBLE) AS change_ci95_low,
    CAST(n.v -> 'change_ci95' ->> 1 AS DOUBLE) AS change_ci95_high,
    n.v ->> 'verdict' AS verdict,
    CAST(n.v ->> 'mde_pct' AS DOUBLE) AS mde_pct,
    CAST(n.v ->> 'blocks' AS INTEGER) AS blocks,
    coalesce(CAST(json_array_length(s.dropped_blocks) AS INTEGER), 0) AS blocks_dropped,
    CAST(n.v ->> 'p_value' AS DOUBLE) AS p_value,
    CAST(n.v ->> 'p_holm' AS DOUBLE) AS p_holm,
    CAST(n.v ->> 'sd_log' AS DOUBLE) AS sd_log,
    n.v ->> 'method' AS method,
    s.status,
    s.spec_hash,
    s.machine_class,
    s.created_at
FROM named AS n
JOIN ab_sessions AS s ON s.session_id = n.session_id
LEFT JOIN phases AS p ON p.session_id = n.session_id;
