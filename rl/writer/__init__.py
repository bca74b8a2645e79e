"""Training of the writer: the warm start (SFT), GRPO on the reader-aware reward, the completion
format and the writer model."""
