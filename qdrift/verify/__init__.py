"""Vendor verification: replay chat-completion requests with tools against endpoints and a reference.

The request file is the JSONL the public K2 Vendor Verifier uses (one chat-completion request body
per line: `messages` and `tools`), optionally with a `_qdrift` field of metadata that is stripped
before sending. `make_requests` writes such a file from qdrift's agent environments;
`verify_endpoints` replays it (resumably) against every endpoint and R reference repeats, and
`compare_to_reference` reports each endpoint's tool-call behaviour against the reference's own
repeat-to-repeat noise floor, with intervals.
"""
