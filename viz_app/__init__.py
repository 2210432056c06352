"""Transformer Attention Lab — the Streamlit app (entry: viz_app/app.py)."""
