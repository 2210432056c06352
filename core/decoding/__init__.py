"""Decoding policies: greedy and beam search with the KV cache, the beam's finishing rules, generation rules, Marian's
shortlist."""
