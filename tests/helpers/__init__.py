"""What tests import (fixtures stay in the conftest files, which import from here too).

- paths: the checkout, the reference data, the demo's sample data, chromium.
- users: a user with roles; an API client with a token of theirs.
- processes: stopping a process a test started; the test database's URL for a subprocess.
- tiny_models: a byte-level BPE tokenizer and a random 2-layer Llama, built in code.
- heavy_imports: which of torch, transformers, peft, scikit-learn a process loaded, and who
  imported each; page_walk: every route fetched by each role in a fresh process.
"""
