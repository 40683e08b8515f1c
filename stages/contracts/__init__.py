"""Leaf contracts that both sides of a boundary import instead of keeping copies: the error root
and exit codes, the capacity files, the SLO verdict rule, the placement environment of a
collocation mode, typed manifest warnings. A module here imports nothing of ours (only the
standard library and pydantic), so `analysis`, `bench_defs` and every package of `stages` may
import it without pulling the rest of `stages` in behind it."""
