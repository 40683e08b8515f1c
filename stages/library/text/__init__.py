"""Text stages: `dataset.prompts` (prompts), `transformers.generate` (generate) and
`transformers.embed` (embed), with what they share: loading a causal LM or encoder
(language_models) and the payload fields (payloads)."""
