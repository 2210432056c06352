"""Text in: the tokenizers (SentencePiece / Marian, T5, tokenizer.json), sentence splitting, the language check."""
