"""The app's state, one job per module (each reads and writes ``st.session_state`` only under the keys that
``params`` declares):

- ``params``: every session key: ``PARAMS`` (what a link carries) and ``SESSION_KEYS`` (widgets and bookkeeping)
- ``url``: the link read into the session on its first run, mirrored into the address bar, problems said once
- ``checkpoints``: the checkpoints on offer, the selected one, its card
- ``server``: once per process: threads, warm-up imports, the loaded models
- ``runs``: the cached translations and analyses (keyed on path, text and ``options_key``)
- ``selection``: the sidebar's options, the sentence, the bundle and the current translation
- ``trace_replay``: a saved trace opened for replay
- ``errors``: a friendly message instead of a traceback
"""
