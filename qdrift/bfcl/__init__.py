"""The Berkeley Function Calling Leaderboard (BFCL v4) on qdrift models, from the bfcl-eval package.

`data` reads BFCL's data files from the installed package (never importing the parts of it that
need its pinned dependencies); `ast_match` is BFCL's AST check of a call against its possible
answers; `shortform` runs single-call categories as short-form items (`qdrift bfcl`, sweep runner
`bfcl`); `multi_turn` drives BFCL's executable multi-turn backends for the agent environment in
agents/bfcl_multi_turn.py. Provenance and licence: qdrift/bfcl/PROVENANCE.md.
"""
