"""The Positional-encoding page's parts: ``describe`` says from the config what the model adds for position (no
Streamlit), ``relative`` draws the tabs of a model with a relative position bias (T5). The page is
views/positional.py."""
