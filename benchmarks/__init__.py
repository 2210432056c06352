"""The lab's benchmarks: ``python -m benchmarks.run`` (``make bench``); see README.md here."""
