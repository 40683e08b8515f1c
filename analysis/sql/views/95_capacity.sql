-- capacity: one row per loaded capacity search (capacity_searches, capacity_probes; loaded by
-- analysis.capacity.warehouse_tables.load_search), the answer beside how it was reached.
--   certified_qps       the highest met rate below the lowest not-met one (conservative);
--   estimate_qps        where the isotonic fit of the over-SLO share crosses 1 - percentile,
--                       with its block-bootstrap 95% interval estimate_qps_ci_low/high;
--   bracket_lo/hi       the certified rate and the lowest rate proven missed above it (NULL
--                       when none was: the search stops on the lowest rate not met, which
--                       may lie below bracket_hi);
--   bracket_ratio       bracket_hi / bracket_lo, the width the capacity is known to at 99%
--                       either side (NULL while one end is missing);
--   within_precision    bracket_ratio <= 1 + precision;
--   probes ...          probes recorded (every kind), of them search probes (not the ceiling
--                       or the unloaded probe), and of the search probes: met, missed,
--                       undecided (a re-probe follows an undecided one, unless it could not
--                       pass), flagged (undecided on two seeds), aborted (stopped early:
--                       abort_reason set). The unloaded probe's verdict is not counted: it
--                       is not a rate of the search;
--   probe_time_s        the probes' summed wall time (every kind);
--   monotonicity_violations, stop_reason, ceiling_qps as capacity.json says;
--   stop_detail         the evidence behind stop_reason, a sentence (NULL: none, or a search
--                       written before capacity II);
--   spent_s             capacity.json's wall time of every probe (NULL while running).
-- For a region ray (pipeline 'A+B') every rate is the ray's scale s (see capacity_region).
CREATE OR REPLACE VIEW capacity AS
WITH counted AS (
    SELECT
        search_id,
        count(*) AS probes,
        count(*) FILTER (WHERE kind = 'search') AS search_probes,
        count(*) FILTER (WHERE kind = 'search' AND verdict = 'met') AS met_probes,
        count(*) FILTER (WHERE kind = 'search' AND verdict = 'missed') AS missed_probes,
        count(*) FILTER (WHERE kind = 'search' AND verdict = 'undecided') AS undecided_probes,
        count(*) FILTER (WHERE kind = 'search' AND flagged) AS flagged,
        count(*) FILTER (WHERE kind = 'search' AND abort_reason IS NOT NULL) AS aborted_probes,
        sum(duration_s) AS probe_time_s
    FROM capacity_probes
    GROUP BY search_id
)
SELECT
    s.search_id,
    s.pipeline,
    s.slo_ms,
    s.percentile,
    s.with_rates,
    s.certified_qps,
    s.estimate_qps,
    s.estimate_ci95_low AS estimate_qps_ci_low,
    s.estimate_ci95_high AS estimate_qps_ci_high,
    s.bracket_lo,
    s.bracket_hi,
    s.bracket_hi / nullif(s.bracket_lo, 0) AS bracket_ratio,
    s.precision,
    s.bracket_hi / nullif(s.bracket_lo, 0) <= 1 + s.precision AS within_precision,
    s.stop_reason,
    s.ceiling_qps,
    coalesce(c.probes, 0) AS probes,
    coalesce(c.search_probes, 0) AS search_probes,
    coalesce(c.met_probes, 0) AS met_probes,
    coalesce(c.missed_probes, 0) AS missed_probes,
    coalesce(c.undecided_probes, 0) AS undecided_probes,
    coalesce(s.flagged_probes, c.flagged, 0) AS flagged_probes,
    coalesce(c.aborted_probes, 0) AS aborted_probes,
    s.monotonicity_violations,
    c.probe_time_s,
    s.probe_s,
    s.complete,
    s.spec_hash,
    s.search_dir,
    s.loaded_at,
    s.stop_detail,
    s.spent_s
FROM capacity_searches AS s
LEFT JOIN counted AS c ON c.search_id = s.search_id;

-- capacity_region: one row per ray of a loaded capacity region (capacity_region_rays), on
-- normalised axes: x = rate_A / C_A and y = rate_B / C_B, C the pipeline's solo capacity. Along
-- a ray at angle t the offered rates are (s cos t C_A, s sin t C_B), so a point at scale s is
-- (x, y) = (s cos t, s sin t).
--   certified_x/y, estimate_x/y   the ray's certified and estimated points (estimate with
--                       its 95% interval, _ci_low/_ci_high, from the interval of s);
--   certified_sum, estimate_sum   x + y: pure time sharing of one device gives x + y = 1, so
--                       a sum above 1 is capacity gained by collocating (the pair shares
--                       better than taking turns), below 1 is capacity lost to interference;
--   certified/estimate_rate_a_qps, _b_qps   the same points in queries per second;
--   time_sharing_s      the scale where the ray meets x + y = 1: 1 / (cos t + sin t);
--   box_s               where it leaves the box [0, 1] x [0, 1] (each at its solo capacity,
--                       no interference at all): 1 / greatest(cos t, sin t).
CREATE OR REPLACE VIEW capacity_region AS
SELECT
    region_id,
    ray_index,
    angle_deg,
    pipeline_a,
    pipeline_b,
    direction_a,
    direction_b,
    solo_capacity_a_qps,
    solo_capacity_b_qps,
    certified_s,
    certified_s * direction_a AS certified_x,
    certified_s * direction_b AS certified_y,
    certified_s * (direction_a + direction_b) AS certified_sum,
    certified_s * direction_a * solo_capacity_a_qps AS certified_rate_a_qps,
    certified_s * direction_b * solo_capacity_b_qps AS certified_rate_b_qps,
    estimate_s,
    estimate_ci95_low_s AS estimate_s_ci_low,
    estimate_ci95_high_s AS estimate_s_ci_high,
    estimate_s * direction_a AS estimate_x,
    estimate_ci95_low_s * direction_a AS estimate_x_ci_low,
    estimate_ci95_high_s * direction_a AS estimate_x_ci_high,
    estimate_s * direction_b AS estimate_y,
    estimate_ci95_low_s * direction_b AS estimate_y_ci_low,
    estimate_ci95_high_s * direction_b AS estimate_y_ci_high,
    estimate_s * (direction_a + direction_b) AS estimate_sum,
    estimate_ci95_low_s * (direction_a + direction_b) AS estimate_sum_ci_low,
    estimate_ci95_high_s * (direction_a + direction_b) AS estimate_sum_ci_high,
    estimate_s * direction_a * solo_capacity_a_qps AS estimate_rate_a_qps,
    estimate_s * direction_b * solo_capacity_b_qps AS estimate_rate_b_qps,
    1 / nullif(direction_a + direction_b, 0) AS time_sharing_s,
    1 / nullif(greatest(direction_a, direction_b), 0) AS box_s,
    bracket_lo_s,
    bracket_hi_s,
    stop_reason,
    probes,
    flagged_probes,
    monotonicity_violations,
    search_id,
    region_dir,
    loaded_at
FROM capacity_region_rays;
