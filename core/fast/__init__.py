"""The fast path: packed weight copies made once per checkpoint and the per-call plan of a cached decoding step."""
