"""The statistics of `collobench ab`, a paired A/B comparison in interleaved blocks: pure
functions of the per-block log differences d_k = ln B - ln A (no processes, no timing, no I/O),
so the runner, the CLI and the warehouse share one judgement and its tests need no run.

- `paired_stats`: the Hodges-Lehmann change with its Wilcoxon signed-rank interval and p-value,
  the paired-t interval beside it, log differences as % changes;
- `verdict`: Holm across a session's figures, then `regressed` / `improved` / `equivalent`
  (two one-sided tests) / `undecided` with the smallest detectable change;
- `looks`: the planned looks (Pocock or O'Brien-Fleming), blocks needed for a change, the
  budget plan;
- `block_orders`: balanced AB/BA orders, and dropping spoiled blocks with a partner.

Imports only the standard library, numpy, scipy and pydantic (tests/test_layering.py)."""
