"""Served models: `http.openai`, a client of an OpenAI-compatible server (openai_http), on a
minimal HTTP/1.1 client (http_wire), with SSE reading (stream), multi-turn sessions (session)
and request shapes (request_shape); and `dataset.synthetic_prompts` (synthetic_prompts), whose
prompts of exact token counts (exact_prompts) and lengths (token_lengths) it sends."""
