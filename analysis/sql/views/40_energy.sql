-- energy: joules each device used over a LOAD WINDOW, per (run_id, trial, phase, pipeline, device).
-- Windows come from `load_windows` (solo: one per baseline, pipeline set; collocated: one per
-- trial, pipeline NULL); samples from `energy_samples` (device 'host' or 'gpu:<index>', energy
-- cumulative since its sampler started, split into drop-free segments). Samplers also run
-- through model loading, warm-up and drain; only the load window counts here.
-- E(t) is the cumulative energy linearly interpolated between the last sample at or before t and
-- the first at or after t, both of ONE segment (one sampler's series), and
-- energy_j = E(window_end) - E(window_start). A window thus takes the samples it contains plus
-- one on each side: solo rows belong to the baseline whose window their segment spans.
-- energy_j is NULL unless one segment brackets BOTH edges (window_covered): an edge is never
-- clamped to the nearest sample, since a window measured in part passes for a whole one
-- (a sampler starting a quarter into the window gave +33% queries per joule). Figures:
--   coverage       share of the window spanned by the best segment's samples, 0..1 (1 exactly
--                  when window_covered); NULL when no usable sample of the device exists in
--                  that phase (nothing measured it) or the window has no length;
--   measured_s     the seconds of the window that segment spans (coverage * window_s);
--   mean_power_w   energy_j / window_s;
--   idle_power_w   the device's measured idle power (`idle_power`), NULL without a baseline;
--   dynamic_energy_j  energy_j - idle_power_w * window_s: what the load added above idle;
--   samples        usable samples of that segment inside the window (edges included);
--   energy_source  every source of the samples used ('+'-joined, e.g. a counter that fell
--                  back to power integration); NULL with energy_j.
-- A device appears for every window of a phase it has rows in; a phase without non-warm-up
-- queries has no window and no row. Idle-phase samples never match a window (phase differs).
CREATE OR REPLACE VIEW energy AS
WITH series AS (
    SELECT w.run_id, w.trial, w.phase, w.pipeline, w.window_start_ns, w.window_end_ns, d.device
    FROM load_windows AS w
    JOIN (SELECT DISTINCT run_id, trial, phase, device FROM energy_samples) AS d
        ON w.run_id = d.run_id AND w.trial = d.trial AND w.phase = d.phase
),
-- Per window, device and segment: the segment's span and its samples around each edge
-- (p.t a time in ns, p.e a cumulative energy in J, p.s its source). One row with a NULL
-- segment when the device has no usable sample in the phase.
per_segment AS (
    SELECT
        s.run_id,
        s.trial,
        s.phase,
        s.pipeline,
        s.device,
        s.window_start_ns,
        s.window_end_ns,
        r.segment,
        min(r.ts_ns) AS first_ns,
        max(r.ts_ns) AS last_ns,
        arg_max({'t': r.ts_ns, 'e': r.energy_j, 's': r.energy_source}, r.ts_ns)
            FILTER (WHERE r.ts_ns <= s.window_start_ns) AS before_start,
        arg_min({'t': r.ts_ns, 'e': r.energy_j, 's': r.energy_source}, r.ts_ns)
            FILTER (WHERE r.ts_ns >= s.window_start_ns) AS after_start,
        arg_max({'t': r.ts_ns, 'e': r.energy_j, 's': r.energy_source}, r.ts_ns)
            FILTER (WHERE r.ts_ns <= s.window_end_ns) AS before_end,
        arg_min({'t': r.ts_ns, 'e': r.energy_j, 's': r.energy_source}, r.ts_ns)
            FILTER (WHERE r.ts_ns >= s.window_end_ns) AS after_end,
        count(r.ts_ns) FILTER (
            WHERE r.ts_ns BETWEEN s.window_start_ns AND s.window_end_ns
        ) AS samples,
        list(DISTINCT r.energy_source) FILTER (
            WHERE r.ts_ns BETWEEN s.window_start_ns AND s.window_end_ns
        ) AS inside_sources
    FROM series AS s
    LEFT JOIN energy_samples AS r
        ON s.run_id = r.run_id AND s.trial = r.trial AND s.phase = r.phase
        AND s.device = r.device AND r.usable
    GROUP BY ALL
),
-- The segment spanning most of the window (the earliest on a tie): the one sampler's series
-- that can measure it.
best AS (
    SELECT
        *,
        greatest(
            least(last_ns, window_end_ns) - greatest(first_ns, window_start_ns), 0
        ) AS covered_ns,
        coalesce(
            first_ns <= window_start_ns
            AND last_ns >= window_end_ns
            AND window_end_ns > window_start_ns,
            false
        ) AS window_covered,
        (window_end_ns - window_start_ns) / 1e9 AS window_s
    FROM per_segment
    QUALIFY row_number() OVER (
        PARTITION BY run_id, trial, phase, pipeline, device
        ORDER BY covered_ns DESC NULLS LAST, segment
    ) = 1
),
-- E at each edge, interpolated inside the chosen segment; only for a covered window.
measured AS (
    SELECT
        *,
        CASE
            WHEN NOT window_covered THEN NULL
            WHEN after_start.t = before_start.t THEN before_start.e
            ELSE before_start.e + (after_start.e - before_start.e)
                * (window_start_ns - before_start.t) / (after_start.t - before_start.t)
        END AS start_e,
        CASE
            WHEN NOT window_covered THEN NULL
            WHEN after_end.t = before_end.t THEN before_end.e
            ELSE before_end.e + (after_end.e - before_end.e)
                * (window_end_ns - before_end.t) / (after_end.t - before_end.t)
        END AS end_e
    FROM best
)
SELECT
    m.run_id,
    m.trial,
    m.phase,
    m.pipeline,
    m.device,
    -- The sources of the samples used: those inside plus the two bracketing ones.
    CASE WHEN m.window_covered THEN array_to_string(
        list_sort(list_distinct(list_concat(
            m.inside_sources, [m.before_start.s, m.after_end.s]
        ))),
        '+'
    ) END AS energy_source,
    m.end_e - m.start_e AS energy_j,
    (m.end_e - m.start_e) / nullif(m.window_s, 0) AS mean_power_w,
    i.idle_power_w,
    m.end_e - m.start_e - i.idle_power_w * m.window_s AS dynamic_energy_j,
    m.window_start_ns,
    m.window_end_ns,
    m.window_s,
    m.window_covered,
    m.covered_ns / nullif(m.window_end_ns - m.window_start_ns, 0) AS coverage,
    m.covered_ns / 1e9 AS measured_s,
    m.samples
FROM measured AS m
LEFT JOIN idle_power AS i ON m.run_id = i.run_id AND m.device = i.device;
