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
--   samples        usable samples inside the window (edges included), of any segment;
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
segments AS (
    SELECT run_id, trial, phase, device, segment, min(ts_ns) AS first_ns, max(ts_ns) AS last_ns
    FROM energy_samples
    WHERE usable
    GROUP BY run_id, trial, phase, device, segment
),
-- Per window and device, the segment spanning most of the window (earliest on a tie).
best AS (
    SELECT
        s.run_id,
        s.trial,
        s.phase,
        s.pipeline,
        s.device,
        s.window_start_ns,
        s.window_end_ns,
        arg_max(
            {'segment': g.segment, 'first_ns': g.first_ns, 'last_ns': g.last_ns},
            {
                'covered_ns': greatest(
                    least(g.last_ns, s.window_end_ns) - greatest(g.first_ns, s.window_start_ns),
                    0
                ),
                'earlier': -g.segment
            }
        ) AS seg
    FROM series AS s
    LEFT JOIN segments AS g
        ON s.run_id = g.run_id AND s.trial = g.trial AND s.phase = g.phase
        AND s.device = g.device
    GROUP BY ALL
),
-- The chosen segment's samples around each edge: p.t is a time (ns), p.e a cumulative energy (J).
edges AS (
    SELECT
        b.run_id,
        b.trial,
        b.phase,
        b.pipeline,
        b.device,
        b.window_start_ns,
        b.window_end_ns,
        b.seg,
        coalesce(
            b.seg.first_ns <= b.window_start_ns
            AND b.seg.last_ns >= b.window_end_ns
            AND b.window_end_ns > b.window_start_ns,
            false
        ) AS window_covered,
        arg_max({'t': r.ts_ns, 'e': r.energy_j}, r.ts_ns)
            FILTER (WHERE r.ts_ns <= b.window_start_ns) AS before_start,
        arg_min({'t': r.ts_ns, 'e': r.energy_j}, r.ts_ns)
            FILTER (WHERE r.ts_ns >= b.window_start_ns) AS after_start,
        arg_max({'t': r.ts_ns, 'e': r.energy_j}, r.ts_ns)
            FILTER (WHERE r.ts_ns <= b.window_end_ns) AS before_end,
        arg_min({'t': r.ts_ns, 'e': r.energy_j}, r.ts_ns)
            FILTER (WHERE r.ts_ns >= b.window_end_ns) AS after_end
    FROM best AS b
    LEFT JOIN energy_samples AS r
        ON b.run_id = r.run_id AND b.trial = r.trial AND b.phase = r.phase
        AND b.device = r.device AND r.segment = b.seg.segment
    GROUP BY ALL
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
        END AS end_e,
        greatest(
            least(seg.last_ns, window_end_ns) - greatest(seg.first_ns, window_start_ns), 0
        ) AS covered_ns,
        (window_end_ns - window_start_ns) / 1e9 AS window_s
    FROM edges
),
figures AS (
    SELECT
        m.*,
        m.end_e - m.start_e AS energy_j,
        (
            SELECT string_agg(DISTINCT r.energy_source, '+' ORDER BY r.energy_source)
            FROM energy_samples AS r
            WHERE r.run_id = m.run_id AND r.trial = m.trial AND r.phase = m.phase
                AND r.device = m.device AND r.segment = m.seg.segment
                AND r.ts_ns BETWEEN m.before_start.t AND m.after_end.t
        ) AS used_sources,
        (
            SELECT count(*)
            FROM energy_samples AS r
            WHERE r.run_id = m.run_id AND r.trial = m.trial AND r.phase = m.phase
                AND r.device = m.device AND r.usable
                AND r.ts_ns BETWEEN m.window_start_ns AND m.window_end_ns
        ) AS samples
    FROM measured AS m
)
SELECT
    f.run_id,
    f.trial,
    f.phase,
    f.pipeline,
    f.device,
    CASE WHEN f.energy_j IS NOT NULL THEN f.used_sources END AS energy_source,
    f.energy_j,
    f.energy_j / nullif(f.window_s, 0) AS mean_power_w,
    i.idle_power_w,
    f.energy_j - i.idle_power_w * f.window_s AS dynamic_energy_j,
    f.window_start_ns,
    f.window_end_ns,
    f.window_s,
    f.window_covered,
    f.covered_ns / nullif(f.window_end_ns - f.window_start_ns, 0) AS coverage,
    f.covered_ns / 1e9 AS measured_s,
    f.samples
FROM figures AS f
LEFT JOIN idle_power AS i ON f.run_id = i.run_id AND f.device = i.device;
