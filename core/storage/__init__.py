"""Checkpoints on disk: folders, safetensors weights with one copy in memory, crash-safe writes, progress."""
