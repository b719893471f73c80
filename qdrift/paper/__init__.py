"""The paper, regenerated from the project's own stored runs (`qdrift paper DIR`, `make -C paper`).

`build` runs the sweeps the paper names (resuming from their stores) and renders the template;
`tables` computes every number from the stores; `figures` draws from the same numbers.
"""

from qdrift.paper.build import build_paper, load_config

__all__ = ["build_paper", "load_config"]
