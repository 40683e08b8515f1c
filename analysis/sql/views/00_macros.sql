-- Macros shared by the views (this file sorts first, so every view can use them).

-- loadgen_quantile(x, p): MLPerf LoadGen's percentile, the one definition used everywhere:
-- sort the non-NULL values ascending and take the one at 0-based index floor(N * p), clamped to
-- N - 1, so the figure is always an observed value (+inf sorts last, so an over-latency query
-- counts as the slowest). NULL when N = 0. An aggregate macro: use it wherever an aggregate may
-- stand; p must be a constant.
-- How: DuckDB's quantile_disc(x, q) returns sorted[ceil(N * q) - 1] (the first value whose
-- cumulative share reaches q), which is LoadGen's index except when N * p is a whole number
-- (and, in floating point, when N * p lands just below one). Asking for p + 1e-12 moves every
-- such case up by one and no other: N * 1e-12 stays below the smallest gap between N * p and
-- the next whole number (1/1000 for p with three decimals) for N up to 10^9 queries per group.
-- tests/analysis/test_intervals.py checks it against the definition for every N to 3,000 and
-- for large N. quantile_disc selects instead of sorting and keeps no list: 2-3x faster than
-- list_sort and much smaller at tens of millions of rows.
CREATE OR REPLACE MACRO loadgen_quantile(x, p) AS quantile_disc(x, least(p + 1e-12, 1.0));

-- loadgen_quantile_levels(ps): the quantile_disc levels that give LoadGen's index for each p.
CREATE OR REPLACE MACRO loadgen_quantile_levels(ps) AS
    list_transform(ps, lambda p: least(p + 1e-12, 1.0));

-- loadgen_quantiles(x, ps): the same for a constant list of p at once, a list in the order of
-- ps. One aggregate keeps one copy of the values where each loadgen_quantile keeps its own:
-- the five latency percentiles of 10M queries fit in 300 MB this way instead of 1 GB.
CREATE OR REPLACE MACRO loadgen_quantiles(x, ps) AS
    quantile_disc(x, loadgen_quantile_levels(ps));

-- loadgen_list_quantiles(items, ps): the same over a list's non-NULL values.
CREATE OR REPLACE MACRO loadgen_list_quantiles(items, ps) AS
    list_aggregate(items, 'quantile_disc', loadgen_quantile_levels(ps));

-- tpot_ms(finished_ns, first_token_ns, tokens): a generation visit's time per output token
-- after the first, in ms: (finished - first token) / (tokens - 1); NULL for a one-token answer
-- (no gap to divide). The `tokens` and `token_goodput` views both judge TPOT by it.
CREATE OR REPLACE MACRO tpot_ms(finished_ns, first_token_ns, tokens) AS
    CASE WHEN tokens > 1 THEN (finished_ns - first_token_ns) / 1e6 / (tokens - 1) END;

-- token_visit(status, first_token_ns, tokens): TRUE for a visit that token timings count: it
-- ended ok and recorded its first token and its token count.
CREATE OR REPLACE MACRO token_visit(status, first_token_ns, tokens) AS
    status = 'ok' AND first_token_ns IS NOT NULL AND tokens IS NOT NULL;

-- t975(df): Student's t quantile 0.975 with df degrees of freedom (two-sided 95% intervals),
-- tabulated for df 1..30 (scipy.stats.t.ppf, 4 decimals), then the normal 1.96. NULL for df < 1.
CREATE OR REPLACE MACRO t975(df) AS
    CAST(CASE
        WHEN df IS NULL OR df < 1 THEN NULL
        WHEN df > 30 THEN 1.96
        ELSE [
            12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
            2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
            2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423
        ][CAST(df AS BIGINT)]
    END AS DOUBLE);

-- wilson95(p, n, side): an end of the Wilson score 95% interval (z = 1.96) of a share p of n
-- independent draws; side = -1 the low end, +1 the high end. Unlike p +- z*sqrt(p(1-p)/n) it
-- stays inside [0, 1] and is sensible at p = 0 and p = 1. NULL when p is NULL.
-- (p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)
CREATE OR REPLACE MACRO wilson95(p, n, side) AS
    (p + 1.96 * 1.96 / (2 * n)
        + side * 1.96 * sqrt(p * (1 - p) / n + 1.96 * 1.96 / (4 * n * n)))
    / (1 + 1.96 * 1.96 / n);

-- Batch means within one trial: the measured queries, in scheduled order, are cut into
-- CI_BATCHES consecutive batches (ntile), a statistic is computed per batch, and its standard
-- error is stddev(batch statistics) / sqrt(batches). Consecutive batches keep the run's
-- autocorrelation inside each batch, which a per-query bootstrap would ignore.
CREATE OR REPLACE MACRO ci_batches() AS 10;

-- batch_slice(items, b): batch b (0-based) of `items`, a list already in batch order, cut as
-- ntile(ci_batches()) cuts: N // 10 values each, the first N % 10 batches one more (fewer than
-- 10 values: one value a batch). Cutting each group's ordered list costs about half the window
-- function `ntile(...) OVER (PARTITION BY ... ORDER BY ...)` over every row; batches b go from
-- 0 to least(N, ci_batches()) - 1.
CREATE OR REPLACE MACRO batch_slice(items, b) AS
    items[
        b * (len(items) // ci_batches()) + least(b, len(items) % ci_batches()) + 1 :
        (b + 1) * (len(items) // ci_batches()) + least(b + 1, len(items) % ci_batches())
    ];

-- batch_count(items): how many batches batch_slice cuts `items` into.
CREATE OR REPLACE MACRO batch_count(items) AS least(len(items), ci_batches());

-- batch_min_size(p): the fewest queries a batch needs for its p-quantile to be more than its
-- maximum (p99 needs 100, p50 needs 2).
CREATE OR REPLACE MACRO batch_min_size(p) AS CAST(round(1 / (1 - p)) AS BIGINT);

-- batch_se(sd, batches, smallest, needed, finite): the batch-means standard error, or NULL when
-- there are not CI_BATCHES batches, the smallest batch has fewer than `needed` queries, or a
-- batch statistic is not finite (an infinite percentile has no spread).
CREATE OR REPLACE MACRO batch_se(sd, batches, smallest, needed, finite) AS
    CASE
        WHEN batches = ci_batches() AND smallest >= needed AND finite
            THEN sd / sqrt(batches)
    END;

-- ci_verdict(low, high, higher_is): what a ratio's interval says. 'no measurable effect' when it
-- spans 1, or lies wholly within 1 +- 1% (an open-loop pipeline that keeps up has the same
-- throughput in both phases to within a few microseconds of its last completion: a tight
-- interval just off 1 is real but means nothing); otherwise 'slower' or 'faster', where
-- higher_is names what a ratio above 1 means ('slower' for latency slowdowns, 'faster' for
-- throughput ratios). NULL without an interval.
CREATE OR REPLACE MACRO ci_verdict(low, high, higher_is) AS
    CASE
        WHEN low IS NULL OR high IS NULL THEN NULL
        WHEN low <= 1 AND high >= 1 THEN 'no measurable effect'
        WHEN low >= 0.99 AND high <= 1.01 THEN 'no measurable effect'
        WHEN low > 1 THEN higher_is
        ELSE CASE WHEN higher_is = 'slower' THEN 'faster' ELSE 'slower' END
    END;

-- log_ratio_half(rv_a, rv_b): half-width of a 95% interval on log(a / b) by the delta method,
-- from the relative variances (se / value)^2 of a and b, each a batch-means estimate with
-- ci_batches() - 1 degrees of freedom; Welch-Satterthwaite combines them. 0 when neither
-- side varies; NULL when either relative variance is NULL.
CREATE OR REPLACE MACRO log_ratio_half(rv_a, rv_b) AS
    CASE
        WHEN rv_a + rv_b = 0 THEN 0.0
        ELSE t975(floor(
            (rv_a + rv_b) ** 2 / ((rv_a ** 2 + rv_b ** 2) / (ci_batches() - 1))
        )) * sqrt(rv_a + rv_b)
    END;

-- at_least_zero(x): x truncated at 0 for the low end of a latency interval (NULL stays NULL,
-- which greatest() would turn into 0).
CREATE OR REPLACE MACRO at_least_zero(x) AS CASE WHEN x IS NOT NULL THEN greatest(0.0, x) END;
