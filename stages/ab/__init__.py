"""`collobench ab`'s session runner: the arms' processes (`arm_process`, with the arm's own side
in `stages.cli.ab_arm`), the session's files (`session_files`), spoiled blocks and verdicts
over the recorded segments (`judgement`), the stored per-block spreads (`spread_store`), the
warm-up, plan and blocks (`session_runner`), and the checks before block 1 (`session_plan`).
The statistics are `stages.ab.stats`, pure functions the runner calls."""
