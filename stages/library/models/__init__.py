"""Model files a user brings: what the loaders share (common), one loader per format (loaders,
hf_folders), which classifier a vision stage runs (classifier_choice), a classifier's signature
against its image batches (fit), and `model.infer` on declared inputs (infer)."""
